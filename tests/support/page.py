"""Reading a page in a real browser (Selenium) without racing its redraws."""

from __future__ import annotations

from typing import Any

# Every matching element's rendered text, whitespace collapsed (as WebDriver's element text
# reads a table: cells apart by a space), joined by " | ".
_TEXT_SCRIPT = """
return [...document.querySelectorAll(arguments[0])]
    .map((element) => element.innerText.replace(/\\s+/g, ' ').trim()).join(' | ');
"""


def page_text(driver: Any, css: str) -> str:
    """The text of every element `css` matches, read in one script call.

    Why: the console redraws its sections on every refresh, so text read element by element
    from a list an earlier WebDriver call found can meet a replaced element: CI saw
    StaleElementReference right after a failover (2026-12-03)."""
    return str(driver.execute_script(_TEXT_SCRIPT, css))
