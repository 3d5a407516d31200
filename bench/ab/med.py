import sys,collections,statistics as st
d=collections.defaultdict(dict)
for l in open(sys.argv[1]):
    f=l.split(); kv=dict(x.split('=') for x in f[2:])
    d[int(f[0])][f[1]]=(float(kv['rps']),float(kv['cpu_us/req']))
cf=sorted({c for r in d for c in d[r]})
for c in cf:
    v=[d[r][c] for r in d if c in d[r]]
    print('%-8s n=%d median rps %.0f (%.0f-%.0f)  cpu us/req %.1f'%(c,len(v),st.median(x[0] for x in v),min(x[0] for x in v),max(x[0] for x in v),st.median(x[1] for x in v)))
for a,b in [p.split('/') for p in sys.argv[2:]]:
    rr=[d[r][a][0]/d[r][b][0] for r in d if a in d[r] and b in d[r]]; cr=[d[r][a][1]/d[r][b][1] for r in d if a in d[r] and b in d[r]]
    print('%s/%s per-round rps ratio median %.2f (%.2f-%.2f), cpu/req ratio median %.2f'%(a,b,st.median(rr),min(rr),max(rr),st.median(cr)))
