"""The machine and diana's own process: time, bounded file reads, the processes diana starts,
the browser, the structured log, and releasing what was acquired."""
