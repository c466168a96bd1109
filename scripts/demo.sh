#!/usr/bin/env bash
# The README's main job until the offline demo lands: build the shipped MedQuAD sample
# knowledge base (idempotent: a second run adds nothing) and search it.
set -euo pipefail
cd "$(dirname "$0")/.."
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
MV=.venv/bin/medverify
KB=${MEDVERIFY_DEMO_KB:-.medverify-demo/kb}
SAMPLE=$(.venv/bin/python -c 'from medverify.kb import sample_kb_path; print(sample_kb_path())')

echo "== ingesting the MedQuAD sample ($SAMPLE) into $KB"
$MV kb ingest "$SAMPLE" --kb "$KB"
$MV kb stats --kb "$KB"
for q in "What is the starting dose of metformin?" \
         "Is acromegaly caused by too much growth hormone?" \
         "Which vaccine prevents shingles in older adults?"; do
  echo
  echo "== kb search: $q"
  $MV kb search --kb "$KB" -k 3 "$q"
done
