"""Jobs run in this process, their arguments passed through: ``bench`` (a script from ``bench/``),
``train`` (a model, registered as a version) and ``eval`` (a registered reasoner on questions)."""

from __future__ import annotations

import argparse
import runpy
import sys
from pathlib import Path

from factloom.config import Settings

__all__ = ["cmd_bench", "cmd_train", "cmd_eval"]

REPO = Path(__file__).resolve().parents[3]


def cmd_bench(args: argparse.Namespace, settings: Settings) -> None:
    script = REPO / "bench" / f"{args.name}.py"
    if not script.exists():
        known = sorted(p.stem for p in (REPO / "bench").glob("*.py") if not p.stem.startswith("_"))
        sys.exit(f"no benchmark {args.name!r}; known: {', '.join(known)}")
    sys.argv = [str(script), *args.rest]
    sys.path.insert(0, str(script.parent))
    runpy.run_path(str(script), run_name="__main__")


def cmd_eval(args: argparse.Namespace, settings: Settings) -> None:
    if args.name != "reasoner":
        sys.exit(f"nothing to evaluate called {args.name!r}; known: reasoner")
    from factloom.learn.evaluate import main as evaluate

    sys.exit(evaluate(args.rest))


def cmd_train(args: argparse.Namespace, settings: Settings) -> None:
    from factloom import learn

    sys.exit(learn.run(args.name, args.rest))
