"""One module per family of the attack bench, each exposing its cases function."""
