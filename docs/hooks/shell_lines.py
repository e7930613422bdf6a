"""Shell commands wrap at their spaces only: in each ``bash`` block of a built page, every word holding a
hyphen (``--compile``, ``marl-ppo``) is kept whole, since a browser may otherwise break a line right after
its hyphen. docs/stylesheets/extra.css lets these blocks wrap (``pre-wrap``); the copy button still
copies the command as written. Written by hand: neither Material nor Pygments has such an option.
"""

from __future__ import annotations

import re

BASH_BLOCK = re.compile(r'(<div class="language-bash highlight"><pre>)(.*?)(</pre></div>)', re.DOTALL)
TEXT = re.compile(r">([^<]*)<")  # the text between two tags
HYPHENATED = re.compile(r"[^\s<>&]*-[^\s<>&]*")


def keep_words_whole(block: str) -> str:
    """``block`` (a highlighted block's HTML) with each hyphenated word of its text in a no-wrap span."""

    def text(match: re.Match) -> str:
        words = HYPHENATED.sub(lambda w: f'<span class="nowrap">{w.group(0)}</span>', match.group(1))
        return f">{words}<"

    return TEXT.sub(text, block)


def on_page_content(html: str, **kwargs) -> str:
    return BASH_BLOCK.sub(lambda m: m.group(1) + keep_words_whole(m.group(2)) + m.group(3), html)
