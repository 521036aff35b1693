"""The book's build and check commands: ``python -m bookkit <command>`` (the Makefile calls them).

==================  ============================================================================
``invalidate-cache``  empty the execution cache after a change of the companion library
``cache-executed``    serve the book build from the notebooks ``make test`` executed
``check-served``      fail if the book build executed a notebook itself
``sync-notebooks``    update the setup cells and the Colab ``.ipynb`` copies (``--check``: report only)
``assignments``       release every chapter's exercises with nbgrader
``course``            write (or refresh) a teacher's nbgrader course outside the build folder
``colab-check``       execute the Colab copies in a fresh environment (wheel + declared dependencies)
``student-source``    write the sources of the student edition of the website
``reseed``            re-run a chapter's reproduce notebook(s) under other seeds
``sitecheck``         check a built website as a reader would
``bench``             print a run-time report (per chapter: wall, CPU, peak memory) against the budget
``schedule``          write the seconds per scheduling group of a run-time report (``make test`` orders by them)
==================  ============================================================================
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .colab import sync_notebooks
from .execution import cache_executed, executed_during_build, invalidate_cache
from .student import make_assignments, make_student_source


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bookkit")
    sub = parser.add_subparsers(dest="command", required=True)
    inv = sub.add_parser("invalidate-cache", help="empty the execution cache after a library change")
    inv.add_argument("--cache", type=Path, required=True)
    inv.add_argument("--doctrees", type=Path, default=None, help="Sphinx's saved environment, removed with the cache")
    syn = sub.add_parser("sync-notebooks", help="update setup cells and the Colab .ipynb copies")
    syn.add_argument("--root", type=Path, default=Path("."))
    syn.add_argument("--check", action="store_true", help="only list what is out of date; exit 1 if anything is")
    asg = sub.add_parser("assignments", help="release every chapter's exercises with nbgrader")
    asg.add_argument("--root", type=Path, default=Path("."))
    asg.add_argument("--out", type=Path, required=True)
    stu = sub.add_parser("student-source", help="write the sources of the student edition")
    stu.add_argument("--root", type=Path, default=Path("."))
    stu.add_argument("--out", type=Path, required=True)
    stu.add_argument("--cache", type=Path, default=None)
    cex = sub.add_parser("cache-executed", help="serve the book build from the notebooks make test executed")
    cex.add_argument("--root", type=Path, default=Path("."))
    cex.add_argument("--executed", type=Path, required=True)
    cex.add_argument("--cache", type=Path, required=True)
    srv = sub.add_parser("check-served", help="fail if the book build executed a notebook itself")
    srv.add_argument("--cache", type=Path, required=True)
    ben = sub.add_parser("bench", help="print a run-time report against the budget")
    ben.add_argument("report", type=Path, nargs="?", default=Path("_build/runtime.json"))
    sch = sub.add_parser("schedule", help="write the seconds per scheduling group of a run-time report")
    sch.add_argument("report", type=Path, nargs="?", default=Path("_build/runtime.json"))
    sch.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "schedule.json")
    crs = sub.add_parser("course", help="write a teacher's nbgrader course (outside _build)")
    crs.add_argument("--root", type=Path, default=Path("."))
    crs.add_argument("--out", type=Path, required=True)
    sub.add_parser("colab-check", help="execute the Colab copies in a fresh environment", add_help=False)
    sub.add_parser("reseed", help="re-run a chapter's reproduce notebook(s) under other seeds", add_help=False)
    sub.add_parser("sitecheck", help="check a built website as a reader would", add_help=False)
    if argv is None:
        argv = sys.argv[1:]
    if argv and argv[0] in ("reseed", "sitecheck", "colab-check"):   # these parse their own arguments
        from . import colabcheck, reseed, sitecheck

        return {"reseed": reseed.main, "sitecheck": sitecheck.main, "colab-check": colabcheck.main}[argv[0]](argv[1:])
    args = parser.parse_args(argv)
    if args.command == "bench":
        import json

        from .pytest_notebooks import budget_lines

        if not args.report.is_file():
            print(f"bench: no run-time report at {args.report} (make test or make bench writes one)")
            return 2
        for line in budget_lines(json.loads(args.report.read_text(encoding="utf-8"))):
            print(line)
        return 0
    if args.command == "schedule":
        import json

        from .pytest_notebooks import load_schedule

        if not args.report.is_file():
            print(f"schedule: no run-time report at {args.report} (make test writes one)")
            return 2
        groups = load_schedule(args.report)
        args.out.write_text(json.dumps(dict(sorted(groups.items(), key=lambda kv: -kv[1])), indent=1) + "\n",
                            encoding="utf-8")
        print(f"schedule: {len(groups)} groups, {sum(groups.values()):.0f} worker-seconds, written to {args.out}")
        return 0
    if args.command == "cache-executed":
        added = cache_executed(args.executed, args.cache, args.root)
        print(f"cache-executed: {len(added)} notebooks executed by the test run now serve the book build")
        return 0
    if args.command == "check-served":
        late = executed_during_build(args.cache)
        for uri in late:
            print(f"check-served: the book build executed {uri} again (not served from the test run)")
        if not late:
            print("check-served: every notebook page was served from the test run's outputs")
        return 1 if late else 0
    if args.command == "assignments":
        for path in make_assignments(args.root, args.out):
            print(f"released: {path}")
        return 0
    if args.command == "course":
        from .course import CourseError, make_course

        try:
            releases = make_course(args.root, args.out)
        except CourseError as exc:
            print(f"course: {exc}")
            return 1
        print(f"course: {len(releases)} assignments in {args.out.resolve()} (see its README.md)")
        return 0
    if args.command == "student-source":
        print(f"student edition sources: {make_student_source(args.root, args.out, args.cache)}")
        return 0
    if args.command == "invalidate-cache":
        if invalidate_cache(args.cache, (args.doctrees,) if args.doctrees else ()):
            print(f"companion_lib changed: emptied the execution cache {args.cache}")
        return 0
    if args.command == "sync-notebooks":
        changed = sync_notebooks(args.root, check=args.check)
        verb = "out of date" if args.check else "updated"
        for path in changed:
            print(f"{verb}: {path}")
        if not changed:
            print("notebooks: all in sync")
        return 1 if (args.check and changed) else 0
    return 2  # pragma: no cover


if __name__ == "__main__":
    sys.exit(main())
