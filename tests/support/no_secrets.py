"""What every connector test checks of a log it reads: no URL in it shows its password, and none
of the secrets the test gave away (decisions #120)."""

from __future__ import annotations

from ackstore.rules import credentials


def assert_no_password(text: str, *secrets: str) -> None:
    """``text`` holds no ``scheme://user:password@`` with its password, nor any of ``secrets``."""
    masked = credentials.masked(text)
    if masked != text:
        at = next(n for n, (a, b) in enumerate(zip(text, masked)) if a != b)
        raise AssertionError(f"a URL's password in the log: …{credentials.masked(text[max(0, at - 60):at])}***…")
    for secret in secrets:
        assert secret not in text, "a secret the test gave the connector is in its log"
