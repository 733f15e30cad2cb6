#!/usr/bin/env bash
# bisect-spec diff as SGLang's pull-request gate: what the change does to the configurations people run.
# Called by examples/sglang-pr-gate.yml; runs anywhere bisect-spec is installed (no GPU):
#
#   examples/sglang-pr-gate.sh CLONE BASE HEAD [OUT]
#
# Diffs commit BASE (the merge base) against HEAD in the SGLang clone CLONE for the models and drafts people
# run most (BISECT_SPEC_PR_TARGETS, MODEL:DRAFT pairs), with the pr-gate strategy (every speculative algorithm,
# DFLASH and NGRAM included, core flags 3-way, page size and attention backend 2-way). Writes one diff per
# target and OUT/comment.md (all of them: the pull-request comment). Exit status 3 when a diff's gate fails
# (a new failure, a known failure catching more, a changed default), 1 or 2 when a diff could not run.
# BISECT_SPEC_ALLOW: signature ids or resolved fields the gate accepts (space-separated; each an --allow).
set -uo pipefail
clone=$1 base=$2 head=$3 out=${4:-pr-gate}
targets=${BISECT_SPEC_PR_TARGETS:-"kimi-k2.6:eagle3 deepseek-v3:specforge-eagle3-deepseek-v3 qwen3-32b:specforge-eagle3-qwen3-32b llama-3.3-70b:specforge-eagle3-llama-3.3-70b"}
allow=()
for item in ${BISECT_SPEC_ALLOW:-}; do allow+=(--allow "$item"); done
mkdir -p "$out"
# the release environment each side's tree runs over (the release at or before it; usually one release)
bisect-spec env install --no-smoke "git:$clone@$base" "git:$clone@$head" || exit 1
status=0
for target in $targets; do
    model=${target%%:*} draft=${target#*:}
    echo "diff $base..$head for $model + $draft" >&2
    bisect-spec diff "git:$clone@$base" "git:$clone@$head" --model "$model" --draft "$draft" --hardware h200 \
        --strategy pr-gate "${allow[@]}" --runs-dir "$out/runs" --markdown "$out/diff-$model.md" > "$out/diff-$model.log" 2>&1
    code=$?
    case $code in
        0) ;;
        3) status=3 ;;
        *) echo "the diff for $model + $draft could not run (exit $code):" >&2; tail -3 "$out/diff-$model.log" >&2; exit "$code" ;;
    esac
done
{ echo "<!-- bisect-spec pr gate -->"; cat "$out"/diff-*.md; } > "$out/comment.md"
exit "$status"
