"""What a running diana-tui shares with `diana` processes on the same data dir: its lock file,
the rows it writes, the requests it takes up, the questions they may ask."""
