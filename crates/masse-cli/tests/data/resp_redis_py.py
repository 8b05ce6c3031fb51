"""redis-py against `masse serve resp`: acknowledged writes survive SIGKILL.

write PORT ACKS: writes until the connection breaks, appending to ACKS one line per
acknowledged write ("set KEY VALUE", "incr KEY N", "del KEY"), flushed before the
next request, from 4 threads using plain commands, pipelines and MSET.
verify PORT ACKS: every acknowledged state is there (a write in flight at the kill
may also have landed: an INCR one more, a key acknowledged deleted may not come back).
"""
import sys
import threading

import redis


def writer(port, acks, lock, t):
    r = redis.Redis(port=port, socket_timeout=30)
    i = 0
    try:
        while True:
            k = f"t{t}:k{i}"
            if i % 3 == 0:
                r.set(k, f"v{i}")
                done = [f"set {k} v{i}"]
            elif i % 3 == 1:
                p = r.pipeline(transaction=False)
                for j in range(8):
                    p.set(f"{k}:{j}", f"p{i}.{j}")
                p.execute()
                done = [f"set {k}:{j} p{i}.{j}" for j in range(8)]
            else:
                r.mset({f"{k}:a": "ma", f"{k}:b": "mb"})
                n = r.incr(f"t{t}:ctr")
                done = [f"set {k}:a ma", f"set {k}:b mb", f"incr t{t}:ctr {n}"]
                if i > 3:
                    r.delete(f"t{t}:k{i - 3}")
                    done.append(f"del t{t}:k{i - 3}")
            with lock:
                acks.write("\n".join(done) + "\n")
                acks.flush()
            i += 1
    except (redis.ConnectionError, redis.TimeoutError, ConnectionError):
        return


def write(port, path):
    lock = threading.Lock()
    with open(path, "w") as acks:
        ts = [threading.Thread(target=writer, args=(port, acks, lock, t)) for t in range(4)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()


def verify(port, path):
    r = redis.Redis(port=port, socket_timeout=30)
    want, ctr = {}, {}
    for line in open(path):
        f = line.split()
        if f[0] == "set":
            want[f[1]] = f[2]
        elif f[0] == "del":
            want[f[1]] = None
        elif f[0] == "incr":
            ctr[f[1]] = int(f[2])
    keys = list(want)
    bad = 0
    for s in range(0, len(keys), 500):
        chunk = keys[s:s + 500]
        for k, v in zip(chunk, r.mget(chunk)):
            v = v.decode() if v is not None else None
            if v != want[k]:
                bad += 1
                if bad < 10:
                    print(f"LOST {k}: want {want[k]!r}, got {v!r}")
    for k, n in ctr.items():
        got = int(r.get(k) or 0)
        if got not in (n, n + 1):
            bad += 1
            print(f"LOST {k}: acknowledged {n}, got {got}")
    print(f"verified {len(want)} keys and {len(ctr)} counters, {bad} lost")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    {"write": write, "verify": verify}[sys.argv[1]](int(sys.argv[2]), sys.argv[3])
