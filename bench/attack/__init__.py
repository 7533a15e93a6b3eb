"""The attack bench (bench/bench_attack.py): the real `diana` against hostile input."""
