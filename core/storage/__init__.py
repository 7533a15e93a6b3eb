"""The SQLite file: its connection and transactions, its schema, values as stored, a finished
call's record and the execution log."""
