"""Hostile input: how the real `diana` command line answers hundreds of bad inputs.

Each case runs `python -m diana.tui.cli --config-dir C --data-dir D ...` as a person would (under
umask 022 unless it says otherwise), in a fresh config dir and data dir of its own, and is
classified:

- clear error: the expected non-zero exit (2 for bad input, 1/3/130 where documented) and a
  stderr of one or a few lines starting with ``diana:`` (or argparse's usage + ``error:``);
- ok: the input is legitimately accepted (a symlink to a regular config file, ...);
- hang: no exit within 30 s (then it is sent SIGINT, and SIGKILL 5 s later);
- traceback: ``Traceback``, ``Exception ignored``, ``Task exception was never retrieved``, a
  line starting ``SomethingError:`` or ``diana: unexpected error:`` (an uncaught exception
  caught by the last line of defence);
- unclear: anything else (an unexpected exit code, a stray stderr line).

and, independently of that outcome, flagged with
- orphans: processes still alive 1 s after the command exited whose command line or
  environment names the case's directory (every process of a case inherits TMPDIR and
  ATTACK_CASE pointing into it; MCP servers inherit TMPDIR), plus the sleepers a fixture
  server wrote down; they are killed and counted (a last sweep at the end catches late ones);
- bypass: a side effect that needed approval (the gate_server's side-effect file, a fact
  saved against a deny, a MARK file written by a forged code_execution, a destructive tool
  run through a name two servers clash on, the model asked under a rule replaced by a deny)
  happened without one;
- secret leak: a configured secret (or a secret-named argument once decided, a value typed
  at a password prompt, an OAuth client secret) appears in any file under the data dir or in
  what the command printed; an OAuth token the same, except in the data dir's oauth/ folder;
- broken promise: what a case verifies besides: every file under the data dir 0600 and
  every folder 0700; a server's requests bounded in size and count, and each answered; a
  task polled no faster than every 0.1 s, and cancelled when its call fails; a refusal that
  names its reason (a missing key, a size limit); a proposal not left approved when its
  approval was refused, nor pending when its asker is dead; a run ledger never written
  through a link; edits saved by hand meanwhile kept; queued reconnects done once; a
  terminal left echoing, its questions asked one at a time;
- escape leaked: an ESC byte (or the 8-bit CSI/OSC, U+009B/U+009D) in stdout or stderr.

Some cases run the command on a terminal (stdin and stderr a pseudo-terminal) with a typist
answering what it asks; some hold a forged diana-tui's lock and rows, or run the real app on
a terminal of its own; some change a config file while the command runs.

Run from the repository root:  .venv/bin/python bench/bench_attack.py [--short] [--list]
[--times] [--part=K/N] [WORD ...] (with words, only the cases whose family or name holds one
of them; with --list, what would run is printed, one case a line, and nothing runs; --times
lists each case's seconds at the end, and its CPU seconds when one case runs at a time;
--part=K/N runs the K-th of N shares of the cases, one at a time, for N runs side by side).
In full, every figure is measured in this run and nothing is asserted. ``--short`` runs one
case of every family, the cheapest in CPU that attacks what the family is about (and one
for each promise no other test of the suite proves: the SHORT set in attack/run.py), prints
the same figures, and exits 1 naming each case with a bypass, traceback, hang, orphan, secret leak,
broken promise or escape leaked (an unclear outcome alone does not fail it).

Inputs that cannot reach diana at all are said so rather than faked: one argv string is at
most 128 KiB on Linux (so a 10 MB --args cannot be passed; the largest that can is, and a
10 MB string goes through `tools add` and a local tool's result instead), and argv cannot
hold a NUL byte (a JSON \u0000 is tried instead). The bench and everything it starts run
under a 4 GiB address-space limit, so a read that never ends (a link to /dev/zero) fails
instead of eating the machine.
"""

from __future__ import annotations

import sys

from attack.run import main  # bench/ is on the path: this file's folder

if __name__ == "__main__":
    sys.exit(main())
