"""The frame of every HTML page of `acp-bridge sessions` (docs/html.md): the style
sheet, the Content-Security-Policy that goes with it, and the head and foot of a page.

The policy forbids everything (`default-src 'none'`) but our one style sheet, allowed
by its hash: no script runs, not ours (the pages have none: collapsing is `<details>`),
not one that text from the log might smuggle in; no image, font or frame is loaded, no
form is sent, no `<base>` is taken. The export carries it as a `<meta http-equiv>`
(the first thing in its head, before any text from the log); `sessions serve` sends it
as a header too, with `frame-ancestors 'none'`, which only a header can carry.
"""

from __future__ import annotations

from acp_bridge.cli.sessions.markup import esc

CSS = """\
:root{color-scheme:light dark;--fg:#1f2328;--muted:#59636e;--bg:#fff;--panel:#f6f8fa;
--line:#d1d9e0;--ok:#1a7f37;--warn:#9a6700;--bad:#cf222e;--run:#0969da;--odd:#8250df;
--add:#dafbe1;--del:#ffebe9;--hunk:#ddf4ff}
@media (prefers-color-scheme:dark){:root{--fg:#e6edf3;--muted:#9198a1;--bg:#0d1117;
--panel:#151b23;--line:#3d444d;--ok:#3fb950;--warn:#d29922;--bad:#f85149;--run:#4493f8;
--odd:#ab7df8;--add:#12261e;--del:#25171c;--hunk:#121d2f}}
*{box-sizing:border-box}
body{margin:0;background:var(--bg);color:var(--fg);font:15px/1.55 system-ui,-apple-system,
"Segoe UI",Roboto,"Noto Sans",sans-serif}
main,header.page,nav,footer.page{max-width:62rem;margin:0 auto;padding:0 1.25rem}
nav{padding-top:.8rem;font-size:.9rem}
a{color:var(--run)}
h1{font-size:1.5rem;margin:1.2rem 0 .4rem;overflow-wrap:anywhere}
h2{font-size:1.15rem;margin:0 0 .2rem;display:flex;flex-wrap:wrap;gap:.5rem;align-items:baseline}
h2 a{color:inherit;text-decoration:none}
dl.fields{display:grid;grid-template-columns:max-content 1fr;gap:.1rem 1rem;margin:.4rem 0 1.2rem;
font-size:.9rem}
dl.fields dt{color:var(--muted)}
dl.fields dd{margin:0;overflow-wrap:anywhere}
code,pre,.mono{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:.86em}
pre{background:var(--panel);border:1px solid var(--line);border-radius:6px;padding:.6rem .8rem;
overflow-x:auto;white-space:pre-wrap;overflow-wrap:anywhere;margin:.4rem 0}
.md pre{white-space:pre}
.md code{background:var(--panel);padding:.1em .3em;border-radius:4px}
.md pre code{background:none;padding:0}
.md blockquote{margin:.4rem 0;padding-left:.9rem;border-left:3px solid var(--line);color:var(--muted)}
.md>:first-child{margin-top:0}.md>:last-child{margin-bottom:0}
.table{overflow-x:auto}
.md table{border-collapse:collapse}.md td,.md th{border:1px solid var(--line);padding:.2rem .5rem}
.align-right{text-align:right}.align-center{text-align:center}.align-left{text-align:left}
section.turn{border:1px solid var(--line);border-left:5px solid var(--muted);border-radius:8px;
margin:1rem 0;padding:.8rem 1rem}
.st-completed{border-left-color:var(--ok)!important}
.st-cancelled,.st-max_tokens,.st-max_steps{border-left-color:var(--warn)!important}
.st-error,.st-interrupted{border-left-color:var(--bad)!important}
.st-running{border-left-color:var(--run)!important}
.st-refusal{border-left-color:var(--odd)!important}
.status{font-size:.8rem;font-weight:600;border-radius:1rem;padding:.05rem .6rem;
border:1px solid currentColor}
.st-completed .status.turn-status{color:var(--ok)}
.st-cancelled .status.turn-status,.st-max_tokens .status.turn-status,
.st-max_steps .status.turn-status{color:var(--warn)}
.st-error .status.turn-status,.st-interrupted .status.turn-status{color:var(--bad)}
.st-running .status.turn-status{color:var(--run)}
.st-refusal .status.turn-status{color:var(--odd)}
.info,.step-head,.usage,.callid{color:var(--muted);font-size:.85rem}
.who{font-weight:600;font-size:.85rem;color:var(--muted);margin:.6rem 0 .2rem}
.prompt .text{white-space:pre-wrap;overflow-wrap:anywhere;background:var(--panel);
border-radius:6px;padding:.5rem .8rem}
.step{margin:.8rem 0 .4rem;padding-top:.4rem;border-top:1px dashed var(--line)}
.partial{color:var(--warn);font-weight:600}
details{margin:.4rem 0;border:1px solid var(--line);border-radius:6px;padding:.2rem .7rem}
details>summary{cursor:pointer;padding:.2rem 0;overflow-wrap:anywhere}
details[open]>summary{border-bottom:1px solid var(--line);margin-bottom:.4rem}
details.thinking{color:var(--muted);font-style:italic}
.tool-name{font-weight:600}
.mark{color:var(--bad);font-weight:600}
.perm{border-radius:1rem;padding:.05rem .5rem;font-size:.8rem;border:1px solid currentColor}
.perm-allow{color:var(--ok)}.perm-reject{color:var(--bad)}.perm-other{color:var(--warn)}
.synthetic{color:var(--warn);font-size:.85rem}
.label{color:var(--muted);font-size:.8rem;margin-top:.4rem}
pre.diff{white-space:pre;padding:.4rem 0}
pre.diff span{display:block;padding:0 .8rem}
pre.diff .add{background:var(--add)}pre.diff .del{background:var(--del)}
pre.diff .hunk{background:var(--hunk);color:var(--muted)}pre.diff .file{font-weight:600}
.end{margin:.8rem 0 0;font-weight:600}
.note{border:1px solid var(--warn);border-radius:6px;padding:.5rem .8rem;margin:.6rem 0}
.damage{border:1px solid var(--bad);color:var(--bad);border-radius:6px;padding:.5rem .8rem}
footer.page{padding-bottom:2rem}
table.sessions{border-collapse:collapse;width:100%;font-size:.9rem}
table.sessions th,table.sessions td{text-align:left;padding:.35rem .5rem;
border-bottom:1px solid var(--line);vertical-align:top}
table.sessions td.num{text-align:right;white-space:nowrap}
table.sessions td.title{overflow-wrap:anywhere;min-width:18rem}
.list-status{font-weight:600}
.list-status.st-completed{color:var(--ok)}.list-status.st-running{color:var(--run)}
.list-status.st-cancelled,.list-status.st-max_tokens,.list-status.st-max_steps{color:var(--warn)}
.list-status.st-error,.list-status.st-interrupted{color:var(--bad)}
.list-status.st-refusal{color:var(--odd)}
form.search{display:flex;flex-wrap:wrap;gap:.4rem;margin:.4rem 0}
form.search input,form.search select,form.search button{font:inherit;color:inherit;background:var(--bg);
border:1px solid var(--line);border-radius:6px;padding:.25rem .5rem}
form.search input[type=search]{flex:1 1 16rem}
ol.hits{list-style:none;padding:0}
ol.hits li{border-bottom:1px solid var(--line);padding:.5rem 0}
.snippet{margin:.2rem 0 0;overflow-wrap:anywhere}
mark{background:var(--hunk);color:inherit;font-weight:600;border-radius:3px}
"""


def source_hash(text: str) -> str:
    """The base64 SHA-256 of `text`, as a policy's `'sha256-...'` names a style or script."""
    import base64
    import hashlib

    return base64.b64encode(hashlib.sha256(text.encode()).digest()).decode()


STYLE_HASH = f"'sha256-{source_hash(CSS)}'"
# What the page allows: our style sheet. `form-action` and `base-uri` are not governed
# by `default-src`, so they are named.
CSP = f"default-src 'none'; style-src {STYLE_HASH}; base-uri 'none'; form-action 'none'"
# The pages of `serve` that hold its search form (the list, the results): a form may be
# sent, to the server itself only (a GET of /TOKEN/search).
SERVED_CSP = CSP.replace("form-action 'none'", "form-action 'self'")
# As a header (`serve`, every page): the same, and the page may be framed by nobody.
CSP_HEADER = SERVED_CSP + "; frame-ancestors 'none'"


def head(title: str, *, nav: str = "", csp: str = CSP) -> str:
    """A page's opening, up to its `<main>`: `title` is text from the log (escaped here);
    `nav` is our own markup (a link back to the list, the search form); `csp` the
    policy (SERVED_CSP for a page with the form)."""
    nav_html = f"<nav>{nav}</nav>" if nav else ""
    return (
        "<!doctype html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
        f"<meta http-equiv=\"Content-Security-Policy\" content=\"{csp}\">\n"
        "<meta name=\"referrer\" content=\"no-referrer\">\n"
        "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
        "<meta name=\"generator\" content=\"acp-bridge sessions\">\n"
        f"<title>{esc(title)} — acp-bridge</title>\n"
        f"<style>{CSS}</style>\n</head>\n<body>\n{nav_html}"
    )


FOOT = "</body>\n</html>\n"


def fields(items: list[tuple[str, str]]) -> str:
    """A definition list of (name, HTML value) pairs: the values are escaped markup."""
    rows = "".join(f"<dt>{name}</dt><dd>{value}</dd>" for name, value in items)
    return f'<dl class="fields">{rows}</dl>'
