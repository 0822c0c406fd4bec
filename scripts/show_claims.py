"""Print the claims a report would evaluate, before any run: the standard claims generated for the tasks of the
params file (tasks/report/claims/standard_claims.yaml) with reports/claims.yaml's additions, overrides and
drops applied (tasks/report/claims/standard.py), as YAML. Read it before writing an override: an entry of
claims.yaml with a claim's id replaces the fields it gives.

    .venv/bin/python scripts/show_claims.py [params.yaml] [reports/claims.yaml]

Exit status 1 with one line on stderr when either file is invalid.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import yaml

from tasks.config import load_params
from tasks.report.claims.standard import claim_set


def main(argv: list[str] | None = None) -> int:
    """Print the run's claims for a params file and a claims file; 1 with one line on stderr when invalid."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("params", nargs="?", default="params.yaml", help="params file (default: params.yaml)")
    parser.add_argument("claims", nargs="?", default="reports/claims.yaml", help="default: reports/claims.yaml")
    args = parser.parse_args(argv)
    try:
        claims = claim_set(Path(args.claims), load_params(args.params).report.setup)
    except ValueError as err:  # ClaimsError, ParamsError: their message names the file and the key
        print(f"error: {err}", file=sys.stderr)
        return 1
    body = {
        "question": claims.question,
        "claims": [claim.model_dump(mode="json", exclude_defaults=True) for claim in claims.claims],
    }
    print(yaml.safe_dump(body, sort_keys=False, width=110, allow_unicode=True), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
