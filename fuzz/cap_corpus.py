"""Caps a minimised corpus at a number of files, keeping as much coverage as
it can: a greedy set cover over the per-file features libFuzzer records in a
merge control file. Owns nothing else; it deletes the files it does not keep.

    fuzz/target/x86_64-unknown-linux-gnu/release/TARGET -merge=1 -use_counters=0 \
        -merge_control_file=/tmp/mcf EMPTY_DIR fuzz/corpus/TARGET
    python3 fuzz/cap_corpus.py /tmp/mcf fuzz/corpus/TARGET 300
"""
import sys, os, shutil
mcf, corpus, limit = sys.argv[1], sys.argv[2], int(sys.argv[3])
lines = open(mcf, errors='replace').read().split('\n')
n = int(lines[0]); files = lines[2:2+n]
ft = {}
for l in lines[2+n:]:
    if l.startswith('FT '):
        p = l.split(); ft[int(p[1])] = set(map(int, p[2:]))
total = set().union(*ft.values())
size = {i: os.path.getsize(files[i]) for i in ft}
covered, chosen = set(), []
while len(chosen) < limit:
    best = max(ft, key=lambda i: (len(ft[i] - covered), -size[i]))
    gain = len(ft[best] - covered)
    if gain == 0: break
    chosen.append(best); covered |= ft[best]; del ft[best]
keep = {os.path.basename(files[i]) for i in chosen}
for f in os.listdir(corpus):
    if f not in keep: os.remove(os.path.join(corpus, f))
print(f"kept {len(chosen)} of {n} files, {len(covered)} of {len(total)} features ({100*len(covered)/len(total):.1f}%)")
