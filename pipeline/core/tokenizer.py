"""The shipped tokenizer.json loaded as the text endpoint uses it, for the parity gate and the bench.

The endpoint itself (pipeline/repository/text_model.py) runs inside Triton's python stub, which cannot import this
package: it does the same in its ``initialize``, and tests/parity/test_text_parity.py holds the three to one behaviour.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pipeline.core.config import TokenizerConfig


def load_tokenizer(path: Path, tok: TokenizerConfig) -> Any:  # noqa: ANN401 - tokenizers.Tokenizer
    """``path`` with the file's own padding off (a batch is padded to its longest row by the caller) and truncation as
    the config says: cut at ``max_length``, or never cut (the endpoint then refuses a longer row), whatever the file set.

    Raises whatever ``tokenizers`` raises for a malformed file (a bare Exception)."""
    from tokenizers import Tokenizer  # lazy: only text models need it

    t = Tokenizer.from_file(str(path))
    t.no_padding()
    if tok.truncation:
        t.enable_truncation(tok.max_length)
    else:
        t.no_truncation()
    return t
