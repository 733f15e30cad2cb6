"""The bug report's pure parts: tracebacks without this machine's paths, launch commands, profile ids."""

from __future__ import annotations

from bisect_spec.model.flags import Config
from bisect_spec.report.bug_report import Names, launch_command, relative_traceback
from bisect_spec.runtime import profiles
from bisect_spec.runtime.model_sources import KNOWN_IDS

TRACEBACK = '''Traceback (most recent call last):
  File "/work/x/bisect_spec/inside/evaluator.py", line 660, in evaluate
    args = self._construct(argv, parser, progress)
  File "/root/.cache/bisect-spec/envs/sglang-0.5.9/site/sglang/srt/server_args.py", line 5078, in from_cli_args
    return cls(**{attr: getattr(args, attr) for attr in attrs})
  File "<string>", line 331, in __init__
  File "/root/.cache/bisect-spec/envs/layers/transformers-4.57.1/site/transformers/configuration_utils.py", line 9, in f
AssertionError'''


def test_traceback_starts_at_sglang_and_names_files_by_package() -> None:
    text = relative_traceback(TRACEBACK)
    assert text.splitlines()[1] == '  File "sglang/srt/server_args.py", line 5078, in from_cli_args'
    assert 'File "transformers/configuration_utils.py", line 9, in f' in text
    for local in ("/root", "/work", "evaluator.py", 'File "<string>"'):
        assert local not in text
    assert "line 331, in __init__" in text and text.endswith("AssertionError")


def test_launch_command_keeps_the_draft_and_the_environment() -> None:
    config = Config.from_argv(["SGLANG_ENABLE_SPEC_V2=1", "--trust-remote-code", "--speculative-algorithm", "EAGLE3",
                               "--speculative-draft-model-path", "@draft"])
    command = launch_command(config, Names("moonshotai/Kimi-K2.6", "lightseekorg/kimi-k2.6-eagle3"),
                             {"SGLANG_X": "a b"}, ["--trust-remote-code"])
    assert command == ("SGLANG_ENABLE_SPEC_V2=1 SGLANG_X='a b' python3 -m sglang.launch_server --model-path "
                       "moonshotai/Kimi-K2.6 --speculative-algorithm EAGLE3 "
                       "--speculative-draft-model-path lightseekorg/kimi-k2.6-eagle3 --trust-remote-code")


def test_every_model_profile_names_its_published_id() -> None:
    for name in profiles.model_names():
        hf_id = profiles.load_model(name).hf_id
        assert hf_id is not None, name
        assert KNOWN_IDS[hf_id.lower()] == name  # a pasted id finds the profile that names it


def test_published_drafts_are_named_for_their_target() -> None:
    kimi = profiles.load_model("kimi-k2.6")
    draft = profiles.load_draft("eagle3", kimi)
    assert draft is not None and draft.hf_id == "lightseekorg/kimi-k2.6-eagle3"
    standalone = profiles.load_draft("standalone", kimi)
    assert standalone is not None and standalone.hf_id is None


def test_a_source_label_is_never_pip_installed_by_version() -> None:
    from bisect_spec.report.reproducers import install_hint

    label = "0.5.1.post3+g6cebe0ab130f"
    git = install_hint(label, {"kind": "git", "commit": "6cebe0ab130f1234", "rev": "v0.5.2~3"})
    tree = install_hint("0.5.1.post3+path.0123456789ab", {"kind": "path", "version": "0.5.2.dev0"})
    for hint in (git, tree):
        assert "pip install sglang==" not in hint and "bisect-spec env run" in hint
    assert "commit 6cebe0ab130f" in git
    assert install_hint("0.5.9").startswith("pip install sglang==0.5.9")
