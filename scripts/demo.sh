#!/usr/bin/env bash
# The README's main command: `medverify demo` builds (or reuses) a knowledge base from the
# shipped MedQuAD sample, checks example answers with planted errors using the built-in
# judge, prints the summaries and writes report.html / report.json. Offline, no key.
set -euo pipefail
cd "$(dirname "$0")/.."
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
exec .venv/bin/medverify demo --out "${MEDVERIFY_DEMO_OUT:-medverify-demo}" "$@"
