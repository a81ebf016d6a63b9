"""``sacct -o JobID,State,NodeList --parsable2 -j ID ...`` for a cluster without an accounting database.

submitit polls ``sacct`` to learn that a job ended without a result (cancelled, failed, node lost); a real
cluster runs slurmdbd with MySQL for it, which the single-node test cluster leaves out. This answers the
same query from ``scontrol show job``, which keeps finished jobs for ``MinJobAge`` seconds.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys


def job_lines(job_id: str) -> list[str]:
    """``JobID|State|NodeList`` of a job and, for an array, of each task (pending tasks as ``id_[0-3]``)."""
    shown = subprocess.run(["scontrol", "--oneliner", "show", "job", job_id], capture_output=True, text=True)
    lines = []
    for record in shown.stdout.splitlines():
        fields = dict(re.findall(r"(\w+)=(\S*)", record))
        task = fields.get("ArrayTaskId", "").split("%")[0]
        if task:
            name = (
                f"{fields['ArrayJobId']}_[{task}]" if any(c in task for c in "-,") else f"{fields['ArrayJobId']}_{task}"
            )
        else:
            name = fields["JobId"]
        nodes = fields.get("NodeList", "")
        lines.append(f"{name}|{fields['JobState']}|{'' if nodes == '(null)' else nodes}")
    return lines


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("-o", "--format", default="JobID,State,NodeList")
    parser.add_argument("--parsable2", "-P", action="store_true")
    parser.add_argument("-j", "--jobs", action="append", default=[])
    args = parser.parse_args(argv)
    if args.format != "JobID,State,NodeList":
        print(f"sacct stand-in: only -o JobID,State,NodeList is answered, not {args.format}", file=sys.stderr)
        return 1
    print("JobID|State|NodeList")
    for job_id in args.jobs:
        for line in job_lines(job_id):
            print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
