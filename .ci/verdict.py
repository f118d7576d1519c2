"""What .ci/run concludes from ``make test``'s output: make's status, unless the output shows a
failure that status does not carry, which must not let CI go green:

- pytest collected no tests (its exit 5, or "no tests ran");
- a part of the broker matrix said it was skipped: with SYMFONIC_BOOTSTRAP_SERVERS set in
  CI's environment, test-cluster, test-versions and test-acls print ``make: <part> needs
  ...: skipped`` (mk/brokers.mk's ``skip``) and exit 0, and the suites they hold never ran.

    python3 .ci/verdict.py <make test's output> <make's status>

Prints why it fails, and the parts' times; exits with the status .ci/run exits with.
Standard library only.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

#: mk/brokers.mk's ``skip``: a part that did not run, and why.
SKIPPED = re.compile(r"^make: (test-[a-z]+) needs (.+?); .*: skipped$")
NO_TESTS = re.compile(r"^(=+ )?no tests ran|exited with status 5$")
#: Each part's time, as mk/*.mk print it.
TIMES = re.compile(r"^make: (test-[a-z]+|image) (finished|passed) in [0-9]+ s$")
#: The statuses a failure make's own does not carry turns into.
NO_TESTS_STATUS, SKIPPED_STATUS = 5, 6


def verdict(output: str, status: int) -> tuple[int, list[str]]:
    """The status to exit with, and what to say."""
    lines = output.splitlines()
    said: list[str] = []
    if any(NO_TESTS.search(line) for line in lines):
        said.append("pytest collected no tests (exit 5): that is a failure")
        status = status or NO_TESTS_STATUS
    skipped = [m for line in lines if (m := SKIPPED.match(line))]
    if skipped:
        parts = ", ".join(f"{m.group(1)} (it needs {m.group(2)})" for m in skipped)
        said.append(f"a broker part was skipped, so its suites never ran: {parts}. "
                    "SYMFONIC_BOOTSTRAP_SERVERS is set in CI's environment: unset it, so "
                    "make test starts the project's brokers")
        status = status or SKIPPED_STATUS
    return status, said


def main(argv: list[str]) -> int:
    if len(argv) != 2 or not argv[1].isdigit():
        print("usage: verdict.py <make test's output> <make's status>", file=sys.stderr)
        return 2
    output = Path(argv[0]).read_text(errors="replace")
    status, said = verdict(output, int(argv[1]))
    for line in said:
        print(f"== .ci/run: {line}", file=sys.stderr)
    print("== .ci/run: the parts' times:")
    for line in output.splitlines():
        if TIMES.match(line):
            print(f"   {line}")
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
