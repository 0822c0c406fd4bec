"""`make plots-template`: the HTML page of `dvc plots show` and `dvc plots diff`, with Vega, Vega-Lite and
vega-embed inline, so that the page draws its plots with no network.

DVC's own page loads the three libraries from a CDN (``dvc_render.vega.VegaRenderer.SCRIPTS``): offline it is a
blank page. DVC fills a template's ``{scripts}`` with those tags and its plots into ``{plot_divs}``; this page
has no ``{scripts}`` and carries the libraries instead, as one bundle from the pinned ``vl-convert-python``
package (``vl_convert.javascript_bundle``: the libraries and their dependencies, assigned to ``window``; Altair
saves offline HTML the same way). Vega-Lite 5, the major version of DVC's and this project's plot templates
(``.dvc/plots/*.json``). ``.dvc/config`` names the page (``plots.html_template``). About 0.9 MB.

    .venv/bin/python scripts/plots_template.py [--output PATH]

Raises ``ValueError`` when the bundle would break the page (a ``</script>`` or a DVC placeholder inside it).
"""

from __future__ import annotations

import argparse
from importlib.metadata import version
from pathlib import Path

import vl_convert

REPO = Path(__file__).resolve().parents[1]
OUTPUT = REPO / ".dvc" / "plots_offline.html"
VEGA_LITE = "5.21"  # the newest 5.x that vl-convert bundles (vl_convert.get_vegalite_versions())
PLACEHOLDERS = ("{plot_divs}", "{scripts}", "{refresh_tag}")

PAGE = """<!DOCTYPE html>
<html>
<head>
    {refresh_tag}
    <meta charset="utf-8">
    <title>DVC Plot</title>
    <!-- {provenance}: written by scripts/plots_template.py; no network needed -->
    <script type="text/javascript">
{bundle}
    </script>
    <style>
        table {
            border-spacing: 15px;
        }
    </style>
</head>
<body>
    {plot_divs}
</body>
</html>
"""


def provenance() -> str:
    """One line naming the bundle's source package and the library versions in it."""
    return (
        f"vl-convert-python {version('vl-convert-python')}: Vega {vl_convert.get_vega_version()}, "
        f"Vega-Lite {VEGA_LITE}, vega-embed {vl_convert.get_vega_embed_version()}"
    )


def page() -> str:
    """The template's text: DVC's page layout with the bundle inline and no ``{scripts}`` placeholder."""
    bundle = vl_convert.javascript_bundle(vl_version=VEGA_LITE)
    bad = [s for s in ("</script", *PLACEHOLDERS) if s in bundle.lower()]
    if bad:
        raise ValueError(f"vl-convert's bundle contains {bad}: it cannot be inlined in the DVC page")
    # the bundle goes in last, so that no replacement runs over its text
    return PAGE.replace("{provenance}", provenance()).replace("{bundle}", bundle)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="make plots-template", description=__doc__.split("\n\n")[0])
    parser.add_argument("--output", type=Path, default=OUTPUT, help=f"default: {OUTPUT.relative_to(REPO)}")
    args = parser.parse_args(argv)
    args.output.write_text(page(), encoding="utf-8")
    print(f"{args.output}: {provenance()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
