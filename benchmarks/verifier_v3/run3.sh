# Round 3 on the lent GPU machine, from the repository root, with .devicecarry/v3 carried
# (prepare_device.py --full): corpus size 100k and 200k (the whole corpus) and leave-one-out
# per edit family at 50k (the round-1 sample, derived here from the whole corpus). One queue,
# 6 runs at once, biggest first; each finished run's verifier.json and log are copied to $OUT
# at once (and the weights of the size runs), so a run cut by the time limit loses only itself
# (queue3.py).
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
D=.devicecarry/v3
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site $D/whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src MEDVERIFY_VERIFIER_BASE=$PWD/$D/base
python3 $D/make_base.py $D/base
mkdir -p /tmp/pairs /tmp/res /tmp/runs
for f in $D/pairs/*.gz; do gunzip -c $f > /tmp/pairs/$(basename $f .gz); done
python3 $D/sample.py $D/corpus.jsonl.xz /tmp/corpus50k.jsonl.gz /tmp/corpus.jsonl.gz
nvidia-smi --query-gpu=name,memory.total --format=csv > $OUT/gpu.txt 2>&1
python3 $D/queue3.py $OUT ${BUDGET:-530}
ls $OUT
