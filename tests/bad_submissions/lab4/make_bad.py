"""Makes tests/bad_submissions/lab4/*.nb.json: the release with every answer filled in from the instructor
version (markers removed), except the ring, which each case replaces by a typical mistake."""
import json
import re
import sys
from pathlib import Path

repo = Path(sys.argv[1])
src = json.loads((repo / "labs/source/lab4_collectives/lab4_collectives.ipynb").read_text())
rel = json.loads((repo / "labs/release/lab4_collectives/lab4_collectives.ipynb").read_text())
answers = {}
for c in src["cells"]:
    m = c["metadata"].get("nbgrader", {})
    if m.get("solution"):
        text = "".join(c["source"]) if isinstance(c["source"], list) else c["source"]
        text = re.sub(r"[ \t]*### (BEGIN|END) SOLUTION\n", "", text)
        answers[m["grade_id"]] = text

RING_HEAD = '''def ring_allreduce(tensor):
    """Sum `tensor` over all processes of the default group, in place, with a ring; returns `tensor`."""
    p, r = dist.get_world_size(), dist.get_rank()
    if p == 1:
        return tensor
    flat = tensor.view(-1)  # a contiguous tensor, seen as one row
'''
CHUNKS = '''def chunk_bounds(n, p):
    """p + 1 offsets cutting n elements into p contiguous chunks whose lengths differ by at most one."""
    return [i * n // p for i in range(p + 1)]


'''
BAD = {
    # every rank first waits to receive from its left neighbour, which is itself waiting: nobody sends
    "deadlock": CHUNKS + RING_HEAD + '''    b = chunk_bounds(flat.numel(), p)
    right, left = (r + 1) % p, (r - 1) % p
    for s in range(p - 1):
        send_i, recv_i = (r - s) % p, (r - s - 1) % p
        incoming = torch.empty(b[recv_i + 1] - b[recv_i], dtype=flat.dtype)
        dist.recv(incoming, left)
        dist.send(flat[b[send_i]:b[send_i + 1]].clone(), right)
        flat[b[recv_i]:b[recv_i + 1]] += incoming
    for s in range(p - 1):
        send_i, recv_i = (r + 1 - s) % p, (r - s) % p
        incoming = torch.empty(b[recv_i + 1] - b[recv_i], dtype=flat.dtype)
        dist.recv(incoming, left)
        dist.send(flat[b[send_i]:b[send_i + 1]].clone(), right)
        flat[b[recv_i]:b[recv_i + 1]] = incoming
    return tensor
''',
    # right answer, wrong exercise: the library's collective does the work
    "calls_all_reduce": CHUNKS + RING_HEAD + '''    dist.all_reduce(flat)
    return tensor
''',
    # chunks of n // p elements: the last n % p elements are never reduced
    "even_sizes_only": CHUNKS + RING_HEAD + '''    size = flat.numel() // p
    right, left = (r + 1) % p, (r - 1) % p
    scratch = torch.empty(size, dtype=flat.dtype)

    def chunk(i):
        return flat[i * size:(i + 1) * size]

    for s in range(p - 1):
        reqs = dist.batch_isend_irecv([dist.P2POp(dist.isend, chunk((r - s) % p), right),
                                       dist.P2POp(dist.irecv, scratch, left)]) if size else []
        for q in reqs:
            q.wait()
        chunk((r - s - 1) % p).add_(scratch)
    for s in range(p - 1):
        reqs = dist.batch_isend_irecv([dist.P2POp(dist.isend, chunk((r + 1 - s) % p), right),
                                       dist.P2POp(dist.irecv, chunk((r - s) % p), left)]) if size else []
        for q in reqs:
            q.wait()
    return tensor
''',
}
out = repo / "tests/bad_submissions/lab4"
out.mkdir(parents=True, exist_ok=True)
for name, ring in BAD.items():
    nb = json.loads(json.dumps(rel))
    for c in nb["cells"]:
        m = c["metadata"].get("nbgrader", {})
        if m.get("solution") and c["cell_type"] == "code":
            c["source"] = ring if m["grade_id"] == "ring" else answers[m["grade_id"]]
    (out / f"{name}.nb.json").write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n")
    print("wrote", name)
