"""What ``launch_server`` does after argument resolution, up to the first step that needs a GPU.

Runs inside an evaluation worker, right after ``prepare_server_args`` (+ ``resolve_once``),
on the same ``ServerArgs``. A configuration is PASSED only when every step below passes:
then a real launch would go on to load weights. Each step is found **by feature** (the
function or module exists in the release), never by version string, so a release newer
than any we know runs the steps it has. Read from the sources of every release family
(``shared/facts/sglang-launch-path.md``); the README lists, per family, which steps run.

One module per SGLang component; each stage is a record (:class:`.stage.Stage`) in its component's module,
and :func:`.order.launch_order` says which stages a release runs, in which order: adding a stage is one
module and one line in the order (``docs/launch-path.md`` has the recipe and the module map).

Stages, in launch order (``Progress.stage`` records how far an evaluation got, or where it
failed):

``parse``
    argparse inside ``prepare_server_args`` (a usage error).
``resolve``
    ``ServerArgs.__post_init__`` and, where it exists, ``resolve_once()``.
``check_server_args``
    ``server_args.check_server_args()``, which ``Engine._launch_subprocesses`` calls in every
    release 0.4.9 … 0.5.23 before it spawns anything (pipeline-parallel × speculative, LoRA,
    tp × pp against nnodes, chunked prefill against page size, …).
``auto_parsers``
    ``resolve_auto_parsers`` (0.5.12+): always from the release that calls it
    unconditionally (it then also declares architecture defaults), else only for an
    ``auto`` parser, as the engine's own guard says. Never raises on a configuration.
``tokenizer_manager``
    ``TokenizerManager.init_model_config`` in the launcher (after ``publish(role="tokenizer")``
    where the release has a runtime context), called on a bare instance: the model config
    again, and the output slots reserved for draft tokens
    (``max(topk * steps, num_draft_tokens)``: a ``TypeError`` when resolution left one unset).
    Only this method runs: the tokenizer itself is not loaded.
``target_model_config``
    the scheduler's ``ModelConfig.from_server_args(server_args)`` (after the scheduler's
    ``publish(role="scheduler")`` where the release has a runtime context): dtype,
    quantization against the checkpoint, context length.
``draft_model_config``
    the target ``ModelRunner``'s speculative pre-device step where the release has it as a
    free function (``resolve_spec_aux_hidden_state_config``: builds the draft's
    ``ModelConfig`` in draft mode).
``model_runner``
    the target ``ModelRunner.__init__`` up to and including ``model_specific_adjustment()``,
    where that method raises (0.4.6 … 0.5.6): an explicit attention backend an MLA model
    cannot use, a dual-chunk model's other backends.
``target_model``
    the target's model class, as SGLang's registry serves it for the architecture, and the runner's
    own call that asks the built model to capture auxiliary hidden states for EAGLE3/DFLASH
    (``set_eagle3_layers_to_capture``: a class without it fails), on a stand-in of the built model
    (:mod:`model_classes`). After the target's attention backends where the release asks for the
    capture after them (0.5.9), before them elsewhere. Speculative configurations only.
``draft_worker_model_config``
    the draft worker's ``ModelConfig`` with the target's context length, which every release
    builds for EAGLE/EAGLE3/NEXTN/STANDALONE (``eagle_worker*.py``, ``standalone_worker*.py``).
    It runs after the target's weights load on a real box: the outcome says so with
    ``after_weights``.
``draft_model``
    the draft's model class (the registry's, for the draft's config) and the draft worker's own
    statements that share the target's embedding and head with it (``get_embed_and_head``,
    ``set_embed_and_head``/``set_embed``), on stand-ins of both built models: the EAGLE family.
``weights``
    reached: a real launch would now set the device and load weights. The stage of every
    PASSED outcome.

Left out, on purpose: ``_set_envs_and_config`` (signal handlers, ``spawn`` start method,
ulimit; its package-version asserts pass on a real install, which a simulated box is),
``PortArgs.init_new`` (port probing), the tokenizer (profiles ship none; it does not depend
on the flags), ``model_specific_adjustment`` where it raises nothing (0.5.8+: it cannot change
a verdict) and everything after ``set_device``.

What the device step would have built, for the stages after it (a real box has them by then):
the parallel groups ``init_torch_distributed`` creates, stood in for with their widths and this
rank's place (:func:`_groups_built`: ``parallel_state``'s globals and, 0.5.21+, the runtime
context's own names, through SGLang's ``get_parallel().override``); a collective or a use of a
process-group handle ends the stage. And tensors placed on a GPU are made on ``meta``
(:mod:`meta_device`): shapes without values; reading a value ends the stage.

Process state: ``publish`` writes SGLang's process-wide runtime context; it is snapshotted
before and restored after (by SGLang's ``snapshot_context`` where it has one, else by saving
the context object's state in place: 0.5.18's ``get_parallel()`` is the same object as its
context's ``parallel``), so evaluations stay independent.

Faults of this emulation (:func:`tool_fault`) are never verdicts: the evaluator records them
as ``crashed`` with ``tool_fault``.
"""

from __future__ import annotations

from .environment import ENV_READ, speculative_env_vars, split_env
from .faults import sglang_verdict, tool_fault
from .order import AFTER_WEIGHTS, ALL_STAGES, STAGE_WORDS, STAGES, launch_order, run_after_resolution
from .server_args import PARSE, RESOLVE, gpus_needed
from .stage import Launch, NotLoaded, Progress, Stage, WillNotStart

__all__ = ["AFTER_WEIGHTS", "ALL_STAGES", "ENV_READ", "PARSE", "RESOLVE", "STAGES", "STAGE_WORDS", "Launch", "NotLoaded",
           "Progress", "Stage", "WillNotStart", "gpus_needed", "launch_order", "run_after_resolution", "sglang_verdict",
           "speculative_env_vars", "split_env", "tool_fault"]
