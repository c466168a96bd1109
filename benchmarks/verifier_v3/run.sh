# On the lent GPU machine, from the repository root, with .devicecarry/v3 carried
# (benchmarks/verifier_v3/prepare_device.py). Round 1 (6 runs at once on one GPU); round 2
# used the same go() with: stage1_epochs=2, lr_stage2=1e-5, stage2_epochs=2, lr=2e-5,
# batch_size=32, stage2_epochs=8 (each with the 50k corpus).
set -e
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .devicecarry/v3/whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src MEDVERIFY_VERIFIER_BASE=$PWD/.devicecarry/v3/base
python3 .devicecarry/v3/make_base.py .devicecarry/v3/base
mkdir -p /tmp/pairs /tmp/res; for f in .devicecarry/v3/pairs/*.gz; do gunzip -c $f > /tmp/pairs/$(basename $f .gz); done
C='corpus=".devicecarry/v3/corpus50k.jsonl.gz"'
go() { name=$1; shift; python3 .devicecarry/v3/go.py $name /tmp/res device='"cuda"' "$@" > /tmp/res/$name.log 2>&1 || echo "$name failed" >> /tmp/res/failed.txt; }
go s2only &
go s1_50k_s2 "$C" &
go s1_25k_s2 "$C" corpus_limit=25000 &
go s1_50k_only "$C" stage2=false &
go s1_50k_s2_no_number "$C" 'exclude_edits=["contradicted/number"]' &
go s1_50k_s2_no_contradicted "$C" 'exclude_edits=["contradicted"]' &
wait
tar czf $OUT/results.tar.gz -C /tmp/res .
