#!/usr/bin/env bash
# Prepared check for a machine with an NVIDIA GPU: how faithful is bisect-spec's simulated GPU?
#
#   (a) environment report (nvidia-smi, torch, python, packages)            -> environment.txt
#   (b) if SGLang and sgl_kernel import: four real launches of a tiny random-weight Llama + EAGLE3
#       draft (one passing, one seed-failing configuration, and one past the weights: an MLA-only
#       attention backend on a non-MLA model, refused -- or not -- only when the backend is chosen,
#       after the weights load; and EAGLE3 with no draft on a tiny Qwen3, sglang#36528, past both models' weights)
#       with `bisect-spec launch`, each checked against
#       `bisect-spec probe --hardware real` (verdict, exception and message; the probe's stage)  -> launch.json
#   (c) the fidelity measurement: scripts/hardware_fidelity.py, real GPU vs the simulated profile
#                                                                            -> fidelity.{json,md}, outcomes.jsonl
# Everything goes to ${OUT:-./gpu-check-out} (flat, at most 7 files); gpu_check.log is the whole output.
# Without a GPU it says so on its first line and exits 0. Budget: under 10 minutes, installs included.
#
# Usage:  scripts/gpu_check.sh                         (SGLang importable by python3, e.g. on PYTHONPATH)
#         PYTHON=/path/python PROFILE=h100 OUT=/tmp/x scripts/gpu_check.sh
set -u

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${PYTHON:-python3}"
PROFILE="${PROFILE:-h200}"
FIDELITY_ARGS="${FIDELITY_ARGS:-}"

# --- is there a GPU? (decided silently: the first line of output says it) ---------------------
gpu_seen=""
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
    gpu_seen="nvidia-smi"
elif "$PY" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' >/dev/null 2>&1; then
    gpu_seen="torch.cuda"
fi
if [ -z "$gpu_seen" ]; then
    echo "no NVIDIA GPU found (neither nvidia-smi nor torch.cuda sees one): gpu_check has nothing to measure here"
    exit 0
fi

OUT="${OUT:-./gpu-check-out}"
mkdir -p "$OUT" || exit 1
OUT="$(cd "$OUT" && pwd)"
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
LOG="$OUT/gpu_check.log"
: > "$LOG"
exec > >(tee -a "$LOG") 2>&1

echo "NVIDIA GPU found (via $gpu_seen); results go to $OUT"
started=$(date +%s)
elapsed() { echo $(( $(date +%s) - started )); }

# --- (a) environment report -------------------------------------------------------------------
ENV_TXT="$OUT/environment.txt"
{
    echo "## date";         date -u
    echo "## uname";        uname -a
    echo "## nvidia-smi";   nvidia-smi 2>&1 || echo "(nvidia-smi not runnable)"
    echo "## nvidia-smi query"
    nvidia-smi --query-gpu=name,memory.total,compute_cap,driver_version --format=csv 2>&1 || true
    echo "## python";       command -v "$PY"; "$PY" -VV
    echo "## torch"
    "$PY" - <<'EOF' 2>&1
import torch
print("torch", torch.__version__, "torch.version.cuda", torch.version.cuda, "cuda available", torch.cuda.is_available())
for i in range(torch.cuda.device_count()):
    print(i, torch.cuda.get_device_properties(i))
    print("   capability", torch.cuda.get_device_capability(i), "mem_get_info", torch.cuda.mem_get_info(i))
EOF
    echo "## packages"
    "$PY" - <<'EOF' 2>&1
import importlib.metadata as md
names = ["sglang", "sgl-kernel", "sglang-kernel", "flashinfer-python", "torch", "triton", "transformers", "tokenizers",
         "huggingface-hub", "pydantic", "fastapi", "click", "psutil", "hypothesis"]
for name in names:
    try:
        print(f"{name}=={md.version(name)}")
    except md.PackageNotFoundError:
        print(f"{name}: not installed")
EOF
} > "$ENV_TXT" 2>&1
echo "(a) environment: $(grep -m1 -E '^\s*[0-9]+ _CudaDeviceProperties|^0 ' "$ENV_TXT" | cut -c1-160)"
grep -E '^(sglang|sgl-kernel|sglang-kernel|torch|transformers)[=:]' "$ENV_TXT" | tr '\n' ' '; echo

# --- (b) real launches, if SGLang can really serve here --------------------------------------
launch_summary="skipped"
if "$PY" -c 'import sglang, sgl_kernel' >/dev/null 2>&1; then
    echo "(b) SGLang and sgl_kernel import: launching a tiny Llama + EAGLE3 draft"
    TINY="$(mktemp -d)"
    if timeout 120 "$PY" "$ROOT/scripts/tiny_models.py" "$TINY"; then
        D="$TINY/draft"
        common=(--sglang current --model-path "$TINY/target" --draft-path "$D")
        spec=(--speculative-algorithm EAGLE3 --speculative-draft-model-path "$D" --mem-fraction-static 0.5
              --disable-cuda-graph)
        passing=("${spec[@]}" --speculative-num-steps 3 --speculative-eagle-topk 1 --speculative-num-draft-tokens 4)
        failing=("${spec[@]}" --speculative-num-draft-tokens 4)  # the seed episode: AssertionError in resolution
        # past the weights: the attention-backend choice (the target's runner, after its weights load)
        after_weights=("${passing[@]}" --attention-backend trtllm_mla)
        if "$PY" -m bisect_spec launch --help >/dev/null 2>&1; then
            # past both models' weights: EAGLE3 with no draft model on a Qwen3 target (sglang#36528): the
            # target's class is built as the draft and has no set_embed (stage draft_model)
            no_draft=(--speculative-algorithm EAGLE3 --mem-fraction-static 0.5 --disable-cuda-graph)
            # past the pool: a decode-graph batch size of 0 (stage cuda_graph_sizes): SGLang's
            # get_batch_sizes_to_capture asserts "capture_bs=[0]" before any capture; 0.5.20+ name the flag by phase
            graph_bs=--cuda-graph-bs
            if "$PY" -m sglang.launch_server --help 2>/dev/null | grep -q -- '--cuda-graph-bs-decode'; then
                graph_bs=--cuda-graph-bs-decode
            fi
            graphs=(--speculative-algorithm EAGLE3 --speculative-draft-model-path "$D" --mem-fraction-static 0.5
                    --speculative-num-steps 3 --speculative-eagle-topk 1 --speculative-num-draft-tokens 4 "$graph_bs" 0)
            for case in passing failing after-weights no-draft graphs; do
                target=("${common[@]}")
                case "$case" in
                    passing) flags=("${passing[@]}") ;;
                    failing) flags=("${failing[@]}") ;;
                    no-draft) flags=("${no_draft[@]}"); target=(--sglang current --model-path "$TINY/qwen3") ;;
                    graphs) flags=("${graphs[@]}") ;;
                    *) flags=("${after_weights[@]}") ;;
                esac
                timeout 200 "$PY" -m bisect_spec launch "${target[@]}" --json -- "${flags[@]}" \
                    > "$TINY/launch-$case.json" 2> "$TINY/launch-$case.err"
                echo "    launch $case: exit $?"
                timeout 120 "$PY" -m bisect_spec probe "${target[@]}" --hardware real --json -- "${flags[@]}" \
                    > "$TINY/probe-$case.json" 2> "$TINY/probe-$case.err"
                echo "    probe $case: exit $?"
            done
            # the launch JSON (schema bisect-spec/launch/1) is read defensively: classification, else status
            launch_summary="$("$PY" - "$TINY" "$OUT/launch.json" <<'EOF'
import json, pathlib, sys
tiny, out = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
def load(name):
    try:
        return json.loads((tiny / name).read_text())
    except (OSError, ValueError) as exc:
        err = tiny / name.replace(".json", ".err")
        return {"unreadable": str(exc), "stderr_tail": err.read_text()[-1500:] if err.is_file() else ""}
report, words = {}, []
for case in ("passing", "failing", "after-weights", "no-draft", "graphs"):
    launch, probe = load(f"launch-{case}.json"), load(f"probe-{case}.json")
    cls = str(launch.get("classification") or launch.get("status") or "?")
    lsig = (launch.get("signature") or {}).get("id")
    outcome = probe.get("outcome") or {}
    pstatus, psig = outcome.get("status", "?"), (outcome.get("signature") or {}).get("id")
    if case == "passing":
        agree = cls.startswith("ready") and pstatus == "passed"
    elif case == "failing":
        agree = cls.startswith("resolution-failed") and pstatus == "failed" and (lsig or cls.split("/")[-1]) == psig
    else:  # after-weights, no-draft, graphs: both pass, or both fail with the same exception and message (past the weights)
        lexc, pexc = launch.get("exception") or {}, (outcome.get("record") or outcome).get("exception") or {}
        agree = ((cls.startswith("ready") and pstatus == "passed")
                 or (not cls.startswith("ready") and pstatus == "failed"
                     and (lexc.get("type"), lexc.get("message")) == (pexc.get("type"), pexc.get("message"))))
    report[case] = {"launch_classification": cls, "launch_signature": lsig, "probe_status": pstatus,
                    "probe_signature": psig, "agree": agree, "launch": launch, "probe": probe}
    words.append(f"{case}: launch {cls} / probe {pstatus}{'/' + psig if psig else ''} -> {'AGREE' if agree else 'DISAGREE'}")
out.write_text(json.dumps(report, indent=2, default=repr) + "\n")
print("; ".join(words))
EOF
)"
        else
            launch_summary="bisect-spec launch is not available in this checkout: launches skipped"
        fi
    else
        launch_summary="could not build the tiny models: launches skipped"
    fi
    echo "    $launch_summary"
else
    launch_summary="SGLang/sgl-kernel not runnable here: full launches skipped"
    echo "(b) $launch_summary"
fi

# --- (c) fidelity: real GPU vs simulated profile ----------------------------------------------
echo "(c) fidelity: real GPU vs simulated $PROFILE ($(elapsed) s so far)"
fidelity_summary="did not finish"
rm -f "$OUT/fidelity.json" "$OUT/fidelity.md"
# Both sides run launch_server's path up to weight loading (check_server_args, model configs; the stage is
# compared too). The simulated box has the GPU packages of a CUDA install (flashinfer, sgl-kernel, ...);
# where this machine lacks them, simulate it bare too, so that like is compared with like.
if ! "$PY" -c 'import importlib.util as u, sys; sys.exit(0 if u.find_spec("flashinfer") else 1)' 2>/dev/null; then
    echo "    no flashinfer here: the simulated side runs without the CUDA packages too (--bare-packages)"
    FIDELITY_ARGS="${FIDELITY_ARGS:-} --bare-packages"
fi
# shellcheck disable=SC2086  # FIDELITY_ARGS is a list of extra options
timeout 360 "$PY" "$ROOT/scripts/hardware_fidelity.py" --sglang current --profile "$PROFILE" --out "$OUT" \
    --log-dir "$OUT" $FIDELITY_ARGS
fidelity_exit=$?
if [ -f "$OUT/fidelity.json" ]; then  # written after each phase: a cut-off run still has a figure
    fidelity_summary="$("$PY" - "$OUT/fidelity.json" "$fidelity_exit" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
wrong = [row["field"] for row in r["profile_check"] if row["match"] is False]
visible = r.get("visible_import_agreement_percent")
state = "" if r.get("finished") else f"UNFINISHED (exit {sys.argv[2]}): "
print(f"{state}{r['agreement_percent']} % agreement ({r['agreeing']}/{r['configs']} configurations), "
      f"{'GPU visible at import: ' + str(visible) + ' %, ' if visible is not None else ''}"
      f"{sum(len(m['disagreements']) for m in r['models'])} field disagreements; "
      f"profile fields differing from the machine: {', '.join(wrong) or 'none'}")
EOF
)"
else
    fidelity_summary="hardware_fidelity.py failed (exit $fidelity_exit) before any figure: see $LOG"
fi

# --- summary ----------------------------------------------------------------------------------
echo
echo "== gpu_check summary ($(elapsed) s) =="
echo "GPU:       $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null | head -n 1)"
echo "launches:  $launch_summary"
echo "fidelity:  $fidelity_summary"
echo "files:     $(cd "$OUT" && ls | tr '\n' ' ')"
exit 0
