"""The whole failing statement comes from the AST, whatever line the traceback reports."""

from __future__ import annotations

from pathlib import Path

from bisect_spec.inside.statements import describe_frame

SOURCE = '''\
def _handle_speculative_decoding(self):
    if self.speculative_algorithm == "EAGLE3":
        if self.speculative_num_steps is None:
            assert (
                self.speculative_eagle_topk is None
                and self.speculative_num_draft_tokens is None
            )
    if (
        self.speculative_eagle_topk > 1
        and self.page_size > 1
    ):
        raise ValueError("x")
'''


def test_multiline_assert_same_statement_for_python_311_and_312_lines(tmp_path: Path) -> None:
    path = tmp_path / "srt" / "server_args.py"
    path.parent.mkdir()
    path.write_text(SOURCE)
    py312 = describe_frame(str(path), 4, "_handle_speculative_decoding", str(tmp_path))
    py311 = describe_frame(str(path), 6, "_handle_speculative_decoding", str(tmp_path))
    for frame in (py311, py312):
        assert frame["file"] == "srt/server_args.py"
        assert frame["statement"] == "assert self.speculative_eagle_topk is None and self.speculative_num_draft_tokens is None"
        assert frame["statement_lines"] == [4, 7]
        assert frame["guard"] == {"line": 3, "text": "if self.speculative_num_steps is None:"}
    assert py311["line"] != py312["line"]


def test_compound_header_is_reported_by_its_header(tmp_path: Path) -> None:
    path = tmp_path / "m.py"
    path.write_text(SOURCE)
    frame = describe_frame(str(path), 9, "_handle_speculative_decoding", str(tmp_path))
    assert frame["statement"] == "if self.speculative_eagle_topk > 1 and self.page_size > 1:"
    assert frame["statement_lines"] == [8, 11]
