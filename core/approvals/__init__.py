"""Human-in-the-loop approval: how risky a call is, and whether a person must decide."""
