import re,sys
from collections import defaultdict
# per file: sample lines come in pairs (process CPU first, then thread CPU) for the reducing section
for f in sys.argv[1:]:
    lines=[l for l in open(f) if l.strip().startswith('sample reducing')]
    tot=defaultdict(lambda:[0,0.0,0.0,0])
    for i in range(0,len(lines)-1,2):
        a=re.search(r'sample (\S+) (\S+): (\d+) ops, (\d+)k/s wall, (\d+)k/s cpu',lines[i]).groups()
        b=re.search(r'sample (\S+) (\S+): (\d+) ops, (\d+)k/s wall, (\d+)k/s cpu',lines[i+1]).groups()
        assert a[0]==b[0]
        ops=int(a[2]); t=tot[a[0]]
        t[0]+=ops; t[1]+=ops/int(a[4]); t[2]+=ops/int(b[4]); t[3]+=1
    out=' '.join(f"{op}: proc {t[0]/t[1]:.0f} thr {t[0]/t[2]:.0f} (n={t[3]}, ops/sample {t[0]//t[3]})" for op,t in tot.items() if op.startswith('reducingAdd'))
    r=tot['reducingAdd+operands']; q=tot['reducingAdd']
    print(f, out, f"ratio proc {(r[0]/r[1])/(q[0]/q[1]):.2f} thr {(r[0]/r[2])/(q[0]/q[2]):.2f}")
