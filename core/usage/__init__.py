"""What calls cost (energy) and how tools are used, from the execution log."""
