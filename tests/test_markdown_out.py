"""Markdown out (issue 19): Telegram HTML and Slack Markdown written from markdown-it tokens.

Each case of the issue is checked on both channels. Telegram chunks must parse as balanced
HTML on their own (checked with ``html.parser`` and the Bot API stand-in's own check);
Slack chunks are parsed back with markdown-it to check what Slack will render.
"""

from __future__ import annotations

import re
from html.parser import HTMLParser

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from markdown_it import MarkdownIt

from lucidgate.channels._markdown import link_allowed, to_plain, utf16_len
from lucidgate.channels.slack.format import payload, to_chunks
from lucidgate.channels.telegram.markdown import MAX_MESSAGE_CHARS, html_to_plain, markdown_to_html, render
from tests.fakes.telegram_api import html_error

TELEGRAM_TAGS = {"b", "i", "s", "code", "pre", "a", "blockquote"}


class _Balance(HTMLParser):
    """Fails on an unknown tag, a close that does not match, or a tag left open."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[str] = []
        self.hrefs: list[str] = []
        self.errors: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag not in TELEGRAM_TAGS:
            self.errors.append(f"unknown <{tag}>")
        if tag == "a":
            self.hrefs.append(dict(attrs).get("href") or "")
        if tag in ("b", "i", "s") and "code" in self.stack:
            self.errors.append(f"<{tag}> inside <code>")
        self.stack.append(tag)

    def handle_endtag(self, tag: str) -> None:
        if not self.stack or self.stack.pop() != tag:
            self.errors.append(f"unmatched </{tag}>")


def assert_balanced(chunk: str) -> list[str]:
    """The chunk is HTML Telegram accepts; returns its link targets."""
    parser = _Balance()
    parser.feed(chunk)
    parser.close()
    assert parser.errors == [] and parser.stack == [], (parser.errors, parser.stack, chunk)
    assert html_error(chunk) is None, chunk
    return parser.hrefs


def slack_html(chunk: str) -> str:
    """What a CommonMark renderer (Slack's markdown block stands in here) makes of a chunk;
    links are not validated, so a ``javascript:`` link would show as one."""
    md = MarkdownIt("commonmark").enable(["table", "strikethrough"])
    md.validateLink = lambda url: True  # type: ignore[method-assign]
    return md.render(chunk)


def telegram(text: str) -> str:
    (chunk,) = render(text)
    assert_balanced(chunk)
    return chunk


def slack(text: str) -> str:
    (chunk,) = to_chunks(text)
    return chunk


# ----------------------------------------------------------------------------- the cases
def test_a_url_with_parentheses_is_kept_whole() -> None:
    source = "See [w](https://en.wikipedia.org/wiki/Foo_(bar)) now."
    assert telegram(source) == 'See <a href="https://en.wikipedia.org/wiki/Foo_(bar)">w</a> now.'
    assert slack(source) == source
    assert '<a href="https://en.wikipedia.org/wiki/Foo_(bar)">w</a>' in slack_html(slack(source))


def test_unbalanced_parentheses_in_a_url_stay_inside_the_link_on_slack() -> None:
    source = "[w](<https://x.test/a(b>)"
    assert telegram(source) == '<a href="https://x.test/a(b">w</a>'
    assert '<a href="https://x.test/a%28b">w</a>' in slack_html(slack(source))


def test_triple_stars_are_bold_and_italic() -> None:
    assert telegram("a ***x*** b") == "a <i><b>x</b></i> b"
    assert "<em><strong>x</strong></em>" in slack_html(slack("a ***x*** b"))


def test_bold_across_lines_is_closed_and_reopened_on_each_line() -> None:
    source = "**bold that\nruns on** and *more\nitalic*"
    assert telegram(source) == "<b>bold that</b>\n<b>runs on</b> and <i>more</i>\n<i>italic</i>"
    chunk = slack(source)
    assert chunk == "**bold that**\n**runs on** and *more*\n*italic*"
    assert slack_html(chunk).count("<strong>") == 2 and slack_html(chunk).count("<em>") == 2


def test_quotes_are_blockquotes_not_escaped_brackets() -> None:
    source = "> first *line*\n> second\n\nafter"
    chunk = telegram(source)
    assert chunk == "<blockquote>first <i>line</i>\nsecond</blockquote>\n\nafter"
    assert "&gt;" not in chunk
    assert slack(source) == source
    assert "<blockquote>" in slack_html(slack(source))


def test_tables_become_an_aligned_grid_and_a_slack_table() -> None:
    source = "| name | qty |\n|:-----|----:|\n| apple | 3 |\n| **pear** & co | 12 |"
    assert telegram(source) == (  # "&amp;" shows as one character: the columns line up
        "<pre>name      | qty\n"
        "----------+----\n"
        "apple     |   3\n"
        "pear &amp; co |  12</pre>"
    )
    chunk = slack(source)
    assert chunk == "| name | qty |\n| :-- | --: |\n| apple | 3 |\n| **pear** & co | 12 |"
    assert "<table>" in slack_html(chunk) and "<strong>pear</strong>" in slack_html(chunk)


@pytest.mark.parametrize("link", [
    "[x](javascript:alert(1))", "[x](JavaScript:alert(1))", "[x](data:text/html,hi)",
    "[x](mailto:me@example.org)", "[x](/relative/path)", "[x](vbscript:msgbox)", "![x](javascript:alert(1))",
])
def test_links_other_than_http_are_dropped_and_their_text_stays(link: str) -> None:
    source = f"click {link} now"
    assert telegram(source) == "click x now"
    chunk = slack(source)
    assert chunk == "click x now"
    assert "href" not in slack_html(chunk)
    assert payload(chunk)["text"] == "click x now"


def test_a_link_inside_emphasis_is_dropped_without_breaking_it() -> None:
    source = "**see [x](javascript:alert(1)) and [y](https://y.test)**"
    assert telegram(source) == '<b>see x and <a href="https://y.test">y</a></b>'
    assert "javascript" not in slack(source)
    assert '<a href="https://y.test">y</a>' in slack_html(slack(source))


@pytest.mark.parametrize("source", [
    "[[x](javascript:a)](javascript:evil)",  # the outer brackets were text; they stay text
    "<[javascript:x](javascript:y)>",  # no autolink may form around a dropped link
    "`0```[y](javascript:alert(1))```",  # a stray backtick does not pair with a code span
    "~~~py`[y](javascript:alert(1))\ncode\n~~~",  # a fence's info string is a bare word
])
def test_no_rewrite_turns_text_into_an_unsafe_link(source: str) -> None:
    for chunk in render(source):
        assert all(link_allowed(h) for h in assert_balanced(chunk))
    (chunk,) = to_chunks(source)
    assert "href" not in slack_html(chunk), chunk


def test_slack_escapes_only_what_could_become_markup() -> None:
    assert slack("a < b, snake_case and 5 \\* 3") == "a < b, snake_case and 5 \\* 3"
    assert slack("[[x](javascript:a)](https://ok.test)") == "\\[x\\](https://ok.test)"  # was text
    assert slack("`` a`b ``") == "``a`b``" and slack("`` `a ``") == "`` `a ``"  # code as parsed


def test_link_allowed_is_http_and_https_only() -> None:
    assert link_allowed("https://x.test/a") and link_allowed("HTTP://x.test")
    for href in ("javascript:alert(1)", "mailto:a@b.c", "/x", "https://", "ftp://x.test", "tg://user?id=1"):
        assert not link_allowed(href), href


def test_tilde_fences_are_code() -> None:
    source = "~~~python\nif a < b:\n    print('**x**')\n~~~"
    assert telegram(source) == (
        '<pre><code class="language-python">if a &lt; b:\n    print(\'**x**\')</code></pre>'
    )
    assert slack(source) == "```python\nif a < b:\n    print('**x**')\n```"


def test_a_fence_inside_code_gets_a_longer_fence_on_slack() -> None:
    source = "````\n```\ninner\n```\n````"
    chunk = slack(source)
    assert chunk == "````\n```\ninner\n```\n````"
    assert "<pre><code>```\ninner\n```\n</code></pre>" in slack_html(chunk)


def test_inline_code_is_never_nested_in_telegram_marks() -> None:
    assert telegram("**a `b` c**") == "<b>a </b><code>b</code><b> c</b>"
    assert telegram("[`b`](https://x.test)") == '<a href="https://x.test">b</a>'
    assert slack("**a `b` c**") == "**a `b` c**"


def test_lists_nest_with_bullets_and_numbers() -> None:
    source = "- one\n  - inner **x**\n3. three\n4. four"
    assert telegram(source) == "• one\n  • inner <b>x</b>\n\n3. three\n4. four"
    assert slack(source) == "- one\n  - inner **x**\n\n3. three\n4. four"


def test_headings_and_rules() -> None:
    assert telegram("# Title *it*\n\n---\n\nend") == "<b>Title <i>it</i></b>\n\n——————\n\nend"
    assert slack("# Title *it*\n\n---\n\nend") == "# Title *it*\n\n---\n\nend"


def test_raw_html_is_text() -> None:
    assert telegram("a <script>x</script> & b") == "a &lt;script&gt;x&lt;/script&gt; &amp; b"


# ----------------------------------------------------------------------------- splitting
def test_chunks_break_between_blocks_first() -> None:
    first, second, third = "A" * 1500, "B " * 900, "C" * 1500
    text = f"{first}\n\n{second.strip()}\n\n{third}"
    assert render(text) == [f"{first}\n\n{second.strip()}", third]
    assert to_chunks(text, 3900) == [f"{first}\n\n{second.strip()}", third]


def test_an_over_long_paragraph_breaks_between_lines_then_at_a_space() -> None:
    lines = [f"line {i} " + "**bold words** " * 5 for i in range(100)]
    chunks = render("\n".join(lines), 400)
    assert all(utf16_len(c) <= 400 for c in chunks)
    for chunk in chunks:
        assert_balanced(chunk)
        assert chunk.startswith("line ")  # a chunk starts at a line, never mid-line
    words = ("word " * 300).strip()
    chunks = render(f"**{words}**", 200)
    assert all(c.startswith("<b>word") and c.endswith("</b>") for c in chunks)
    assert "".join(html_to_plain(c) for c in chunks).split() == words.split()


def test_a_code_block_longer_than_a_chunk_is_cut_and_reopened() -> None:
    code = "\n".join(f"x{i} = {i} < {i + 1}" for i in range(400))
    source = f"intro\n\n```py\n{code}\n```\n\noutro"
    chunks = render(source)
    assert len(chunks) >= 2
    code_chunks = [c for c in chunks if "<pre>" in c]
    for chunk in chunks:
        assert utf16_len(chunk) <= MAX_MESSAGE_CHARS
        assert_balanced(chunk)
    assert all(c.count('<pre><code class="language-py">') == 1 and c.count("</code></pre>") == 1
               for c in code_chunks)
    shown = "\n".join(html_to_plain(c) for c in chunks)
    assert all(f"x{i} = {i} < {i + 1}" in shown for i in range(400))

    pieces = to_chunks(source, 1000)
    assert all(len(p) <= 1000 for p in pieces)
    fenced = [p for p in pieces if "```" in p]
    assert len(fenced) >= 5
    assert all(re.fullmatch(r"(intro\n\n)?```py\n[^`]*\n```(\n\noutro)?", p) for p in fenced)
    assert "\n".join(pieces).count("x399 = 399 < 400") == 1


def test_a_single_over_long_line_is_hard_cut() -> None:
    chunks = render("x" * 9000)
    assert [len(c) for c in chunks] == [4096, 4096, 808]
    assert to_chunks("y" * 9000, 3900) == ["y" * 3900, "y" * 3900, "y" * 1200]


def test_cjk_text_is_cut_by_utf16_length_without_losing_a_character() -> None:
    text = "漢字かな交じり文。" * 1000  # no spaces anywhere
    chunks = render(text)
    assert len(chunks) == 3 and all(utf16_len(c) <= MAX_MESSAGE_CHARS for c in chunks)
    assert "".join(chunks) == text
    emoji = "😀" * 3000  # two UTF-16 units each: 6,000 units
    parts = render(emoji)
    assert [utf16_len(p) for p in parts] == [4096, 1904]
    assert "".join(to_chunks(text, 3900)) == text


def test_cjk_table_columns_line_up() -> None:
    chunk = telegram("| 名前 | n |\n|---|---|\n| りんご | 3 |\n| pear | 12 |")
    assert chunk == "<pre>名前   | n\n-------+---\nりんご | 3\npear   | 12</pre>"


def test_empty_input_gives_no_chunks() -> None:
    for blank in ("", "   ", "\n\n\n", " \n \t\n"):
        assert render(blank) == [] and to_chunks(blank) == []
    assert markdown_to_html("") == "" and to_plain("") == ""


def test_slack_fallback_is_the_plain_text() -> None:
    chunk = slack("# Hi\n\n- **a** [b](https://b.test)\n\n```\ncode\n```")
    assert payload(chunk) == {
        "blocks": [{"type": "markdown", "text": chunk}],
        "text": "Hi\n\n• a b\n\ncode",
    }


# ----------------------------------------------------------------------------- any input
_PIECES = st.sampled_from([
    "**", "*", "_", "__", "~~", "`", "```", "~~~", "\n", "\n\n", "> ", "- ", "1. ", "# ", "| a | b |\n|---|---|\n",
    "[x](https://a.test/(b))", "[y](javascript:alert(1))", "<b>", "&amp;", "&", "<", "\\*", "word ", "漢字",
    "😀", "  ", "---\n", "![i](data:x)", "<https://auto.test>", "    code\n", "[", "]", "(", ")",
    "](javascript:x)", "](https://ok.test)", "<javascript:x>", "~~~py`", "\\", "_x_", "snake_case",
])
_TEXT = st.lists(st.one_of(_PIECES, st.text(max_size=8)), max_size=60).map("".join)


@settings(max_examples=300, deadline=None)
@given(text=_TEXT, limit=st.integers(min_value=80, max_value=600))
def test_every_telegram_chunk_is_balanced_and_fits(text: str, limit: int) -> None:
    for chunk in render(text, limit):
        assert utf16_len(chunk) <= limit
        hrefs = assert_balanced(chunk)
        assert all(link_allowed(h) for h in hrefs)


@settings(max_examples=300, deadline=None)
@given(text=_TEXT, limit=st.integers(min_value=80, max_value=600))
def test_every_slack_chunk_fits_and_links_only_to_http(text: str, limit: int) -> None:
    for chunk in to_chunks(text, limit):
        assert utf16_len(chunk) <= limit
        hrefs = re.findall(r'href="([^"]*)"', slack_html(chunk))
        assert all(h.startswith(("http://", "https://")) for h in hrefs), (chunk, hrefs)
        assert payload(chunk)["blocks"][0]["type"] == "markdown"
