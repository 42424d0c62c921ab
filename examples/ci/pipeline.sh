#!/usr/bin/env bash
# pipeline.sh plan|apply — the CI pipeline of a model catalog repository
# (a folder of model YAML and modules/model-catalog; see README.md).
#
#   plan   on a pull request: terraform plan -detailed-exitcode. Writes the
#          plan's text, warnings included (e.g. "No node can hold model …"),
#          to plan.txt for a review comment. Exits 0 with or without changes,
#          non-zero when the plan fails (a bad file, placement_check="error").
#   apply  on merge: terraform apply; returns when every changed model
#          serves (the provider waits for the rollout) or fails with its
#          reason.
#
# Environment: LLMGW_ENDPOINT, LLMGW_TOKEN, LLMGW_CA_CERT (the provider's
# settings, as `llmgw dev` writes them to .llmgw-dev/env, or CI secrets);
# CATALOG_DIR, the catalog's directory (default: the current one);
# TERRAFORM, the terraform binary (default: terraform on PATH).
# On GitHub Actions the plan's result is also written to $GITHUB_OUTPUT
# (changes=true|false) and the plan to $GITHUB_STEP_SUMMARY.
set -euo pipefail

usage() { echo "usage: $0 plan|apply" >&2; exit 64; }
[ $# -eq 1 ] || usage
mode=$1
case $mode in plan | apply) ;; *) usage ;; esac

dir=${CATALOG_DIR:-.}
tf=${TERRAFORM:-terraform}
export TF_IN_AUTOMATION=1 TF_INPUT=0

for v in LLMGW_ENDPOINT LLMGW_TOKEN LLMGW_CA_CERT; do
  if [ -z "${!v:-}" ]; then
    echo "$0: $v is not set: source .llmgw-dev/env, or set it from the pipeline's secrets" >&2
    exit 2
  fi
done

"$tf" -chdir="$dir" init -input=false -no-color

if [ "$mode" = apply ]; then
  exec "$tf" -chdir="$dir" apply -input=false -auto-approve -no-color
fi

# plan: 0 no change, 1 error, 2 changes.
set +e
"$tf" -chdir="$dir" plan -input=false -no-color -detailed-exitcode -out=tfplan 2>&1 | tee "$dir/plan.txt"
rc=${PIPESTATUS[0]}
set -e
case $rc in
  0) changes=false ;;
  2) changes=true ;;
  *) echo "$0: terraform plan failed (exit $rc); see above" >&2; exit "$rc" ;;
esac
if [ -n "${GITHUB_OUTPUT:-}" ]; then echo "changes=$changes" >>"$GITHUB_OUTPUT"; fi
if [ -n "${GITHUB_STEP_SUMMARY:-}" ]; then
  { echo '```'; cat "$dir/plan.txt"; echo '```'; } >>"$GITHUB_STEP_SUMMARY"
fi
if grep -q 'Warning: ' "$dir/plan.txt"; then
  echo "$0: the plan has warnings (see plan.txt): e.g. a model no node can hold, or running replicas a change replaces" >&2
fi
echo "$0: changes=$changes"
