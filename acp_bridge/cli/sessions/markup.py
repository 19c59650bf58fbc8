"""Text from a log made safe for HTML, for `acp-bridge sessions export --format html` and
`sessions serve` (docs/html.md): escaped text, long text escaped a piece at a time, and
a model's Markdown rendered by markdown-it-py with raw HTML off, so every bit of HTML a
model (or a wrapped agent, or whoever edited the log) wrote is shown as text.

Everything from the log goes through `esc` or `markdown`: `clean` first (control
characters shown escaped, as at the terminal), then the bidirectional-text controls
made visible too (a file name with U+202E in it cannot show reversed), then HTML
escaping, quotes included, so a value is safe in an attribute as well as in text.

Links in Markdown keep only `http:`, `https:` and `mailto:` targets; any other (a
`javascript:` or `data:` URL, written plainly, as an autolink, a reference or with
entities) leaves the link as text. Images are never loaded (the page fetches nothing):
an image becomes a link to it, marked as one. markdown-it-py is imported only here, on
the HTML path (docs/architecture.md: heavy parts on their own path).
"""

from __future__ import annotations

from acp_bridge.cli.safe_text import clean
from acp_bridge.cli.sessions.text import Lines

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterator

    from markdown_it import MarkdownIt

# A model's answer up to this many characters is rendered as Markdown; a longer one (a
# step that streamed megabytes) is shown as escaped text, a piece at a time: rendering it
# would hold its whole token tree (many times the text) in memory.
MARKDOWN_CHARS = 1 << 20

LINK_SCHEMES = frozenset({"http", "https", "mailto"})
LINK_REL = "noopener noreferrer nofollow"

# Explicit embeddings, overrides and isolates, and the marks: shown as \u202e.
_BIDI = {c: f"\\u{c:04x}" for c in (0x200E, 0x200F, 0x061C, *range(0x202A, 0x202F),
                                    *range(0x2066, 0x206A))}
_HTML = {ord("&"): "&amp;", ord("<"): "&lt;", ord(">"): "&gt;", ord('"'): "&quot;",
         ord("'"): "&#x27;"}


def visible(text: str) -> str:
    """`clean`, and the bidirectional controls shown escaped: not yet HTML-escaped."""
    return clean(text).translate(_BIDI)


def esc(text: str) -> str:
    """Text from the log as HTML text or an attribute value."""
    return visible(text).translate(_HTML)


def escape_markup(text: str) -> str:
    """Text that is ours or already `visible`, HTML-escaped."""
    return text.translate(_HTML)


class HtmlLines(Lines):
    """`Lines` (cleaned, a piece at a time) with each piece HTML-escaped: long text in a
    `<pre>` without a copy of it whole."""

    __slots__ = ()

    def pieces(self) -> Iterator[str]:
        for piece in super().pieces():
            yield piece.translate(_BIDI).translate(_HTML)


def safe_link(url: str) -> bool:
    """Whether a (normalized) link target may be a link: an allowed scheme, nothing else."""
    from urllib.parse import urlsplit

    try:
        scheme = urlsplit(url.strip()).scheme.lower()
    except ValueError:
        return False
    return scheme in LINK_SCHEMES


_PARSER: MarkdownIt | None = None


def _parser() -> MarkdownIt:
    global _PARSER
    if _PARSER is None:
        _PARSER = _make_parser()
    return _PARSER


def _make_parser() -> MarkdownIt:
    from markdown_it import MarkdownIt
    from markdown_it.renderer import RendererHTML

    class Parser(MarkdownIt):
        def validateLink(self, url: str) -> bool:
            return safe_link(url)

    class Renderer(RendererHTML):
        def link_open(self, tokens, idx, options, env):  # type: ignore[no-untyped-def]
            tokens[idx].attrSet("rel", LINK_REL)
            return self.renderToken(tokens, idx, options, env)

        def image(self, tokens, idx, options, env):  # type: ignore[no-untyped-def]
            token = tokens[idx]
            alt = self.renderInlineAsText(token.children or [], options, env)
            src = escape_markup(str(token.attrGet("src") or ""))
            return (f'<a class="image" href="{src}" rel="{LINK_REL}">'
                    f"[image: {escape_markup(alt) or src}]</a>")

        def table_open(self, tokens, idx, options, env):  # type: ignore[no-untyped-def]
            return '<div class="table">' + self.renderToken(tokens, idx, options, env)

        def table_close(self, tokens, idx, options, env):  # type: ignore[no-untyped-def]
            return self.renderToken(tokens, idx, options, env) + "</div>"

        def th_open(self, tokens, idx, options, env):  # type: ignore[no-untyped-def]
            return _cell(self, tokens, idx, options, env)

        def td_open(self, tokens, idx, options, env):  # type: ignore[no-untyped-def]
            return _cell(self, tokens, idx, options, env)

    # CommonMark with raw HTML off (an HTML block or tag in the text is escaped), GFM's
    # tables and strikethrough, no typographer (text shows as written).
    parser = Parser("commonmark", {"html": False, "linkify": False, "typographer": False},
                    renderer_cls=Renderer)
    return parser.enable(["table", "strikethrough"])


def _cell(renderer: object, tokens: list, idx: int, options: object, env: object) -> str:  # type: ignore[type-arg]
    # A column's alignment is a class, not a style attribute: the page's CSP allows no
    # inline styles.
    token = tokens[idx]
    style = str(token.attrGet("style") or "")
    if style:
        token.attrs.pop("style", None)
        align = style.removeprefix("text-align:")
        if align in ("left", "center", "right"):
            token.attrSet("class", f"align-{align}")
    return str(renderer.renderToken(tokens, idx, options, env))  # type: ignore[attr-defined]


def markdown(text: str) -> str:
    """A model's Markdown as HTML."""
    return str(_parser().render(visible(text)))


def model_text(text: str) -> list[str | Lines]:
    """A model's text (an answer, a thought) for a page: Markdown rendered, or, past
    MARKDOWN_CHARS, escaped text in a `<pre>`, a piece at a time."""
    if len(text) <= MARKDOWN_CHARS:
        return [f'<div class="md">{markdown(text.strip())}</div>']
    return ['<pre class="long">', HtmlLines(text, strip=True), "</pre>"]
