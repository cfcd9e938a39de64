"""Honest corpus for `teach similarity`: ten Lab 2 answers written independently for this test (H7, 2026-12-02).

Each entry holds the bodies of the three kernels a learner writes in Lab 2 (naive, tiled, grouped). They were
written one by one in different styles (2-D or 1-D grids, pointer increments or recomputed offsets, masks
built differently, different loop counters, ``tl.swizzle2d`` or hand-written grouping), as ten students who
never saw each other's work or the instructor's solution would. None is a copy of another, of the
instructor solution or of the Triton tutorial; the similarity check must flag none of them.
"""

HONEST = {
    "h01": {
        "naive": """
    row = tl.program_id(0)
    col = tl.program_id(1)
    total = tl.zeros((BLOCK_K,), dtype=tl.float32)
    for start in range(0, K, BLOCK_K):
        kk = start + tl.arange(0, BLOCK_K)
        ok = kk < K
        x = tl.load(a_ptr + row * stride_am + kk * stride_ak, mask=ok, other=0.0).to(tl.float32)
        y = tl.load(b_ptr + kk * stride_bk + col * stride_bn, mask=ok, other=0.0).to(tl.float32)
        total += x * y
    result = tl.sum(total, axis=0)
    tl.store(c_ptr + row * stride_cm + col * stride_cn, result.to(c_ptr.dtype.element_ty))
""",
        "tiled": """
    bm = tl.program_id(0)
    bn = tl.program_id(1)
    r = bm * BLOCK_M + tl.arange(0, BLOCK_M)
    c = bn * BLOCK_N + tl.arange(0, BLOCK_N)
    out = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for kstart in range(0, K, BLOCK_K):
        kidx = kstart + tl.arange(0, BLOCK_K)
        tile_a = tl.load(a_ptr + r[:, None] * stride_am + kidx[None, :] * stride_ak,
                         mask=(r[:, None] < M) & (kidx[None, :] < K), other=0.0)
        tile_b = tl.load(b_ptr + kidx[:, None] * stride_bk + c[None, :] * stride_bn,
                         mask=(kidx[:, None] < K) & (c[None, :] < N), other=0.0)
        out += tl.dot(tile_a, tile_b)
    keep = (r[:, None] < M) & (c[None, :] < N)
    tl.store(c_ptr + r[:, None] * stride_cm + c[None, :] * stride_cn, out.to(c_ptr.dtype.element_ty), mask=keep)
""",
        "grouped": """
    pid = tl.program_id(0)
    tiles_m = tl.cdiv(M, BLOCK_M)
    tiles_n = tl.cdiv(N, BLOCK_N)
    tm, tn = tl.swizzle2d(pid // tiles_n, pid % tiles_n, tiles_m, tiles_n, GROUP_M)
    r = tm * BLOCK_M + tl.arange(0, BLOCK_M)
    c = tn * BLOCK_N + tl.arange(0, BLOCK_N)
    out = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for kstart in range(0, K, BLOCK_K):
        kidx = kstart + tl.arange(0, BLOCK_K)
        tile_a = tl.load(a_ptr + r[:, None] * stride_am + kidx[None, :] * stride_ak,
                         mask=(r[:, None] < M) & (kidx[None, :] < K), other=0.0)
        tile_b = tl.load(b_ptr + kidx[:, None] * stride_bk + c[None, :] * stride_bn,
                         mask=(kidx[:, None] < K) & (c[None, :] < N), other=0.0)
        out += tl.dot(tile_a, tile_b)
    tl.store(c_ptr + r[:, None] * stride_cm + c[None, :] * stride_cn, out.to(c_ptr.dtype.element_ty),
             mask=(r[:, None] < M) & (c[None, :] < N))
""",
    },
    "h02": {
        "naive": """
    pid_row = tl.program_id(axis=0)
    pid_col = tl.program_id(axis=1)
    a_row = a_ptr + pid_row * stride_am
    b_col = b_ptr + pid_col * stride_bn
    acc = 0.0
    steps = tl.cdiv(K, BLOCK_K)
    for s in range(steps):
        offs = s * BLOCK_K + tl.arange(0, BLOCK_K)
        va = tl.load(a_row + offs * stride_ak, mask=offs < K, other=0.0)
        vb = tl.load(b_col + offs * stride_bk, mask=offs < K, other=0.0)
        acc += tl.sum(va.to(tl.float32) * vb.to(tl.float32))
    dst = c_ptr + pid_row * stride_cm + pid_col * stride_cn
    tl.store(dst, acc.to(c_ptr.dtype.element_ty))
""",
        "tiled": """
    pm = tl.program_id(axis=0)
    pn = tl.program_id(axis=1)
    rm = pm * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pn * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    pa = a_ptr + rm[:, None] * stride_am + rk[None, :] * stride_ak
    pb = b_ptr + rk[:, None] * stride_bk + rn[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    remaining = K
    while remaining > 0:
        ka = tl.load(pa, mask=(rm[:, None] < M) & (rk[None, :] < remaining), other=0.0)
        kb = tl.load(pb, mask=(rk[:, None] < remaining) & (rn[None, :] < N), other=0.0)
        acc = tl.dot(ka, kb, acc)
        pa += BLOCK_K * stride_ak
        pb += BLOCK_K * stride_bk
        remaining -= BLOCK_K
    pc = c_ptr + rm[:, None] * stride_cm + rn[None, :] * stride_cn
    tl.store(pc, acc.to(c_ptr.dtype.element_ty), mask=(rm[:, None] < M) & (rn[None, :] < N))
""",
        "grouped": """
    pid = tl.program_id(axis=0)
    n_m = tl.cdiv(M, BLOCK_M)
    n_n = tl.cdiv(N, BLOCK_N)
    band = GROUP_M * n_n
    band_id = pid // band
    band_row0 = band_id * GROUP_M
    band_h = tl.minimum(n_m - band_row0, GROUP_M)
    inside = pid - band_id * band
    pm = band_row0 + inside % band_h
    pn = inside // band_h
    rm = pm * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pn * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    pa = a_ptr + rm[:, None] * stride_am + rk[None, :] * stride_ak
    pb = b_ptr + rk[:, None] * stride_bk + rn[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    remaining = K
    while remaining > 0:
        ka = tl.load(pa, mask=(rm[:, None] < M) & (rk[None, :] < remaining), other=0.0)
        kb = tl.load(pb, mask=(rk[:, None] < remaining) & (rn[None, :] < N), other=0.0)
        acc = tl.dot(ka, kb, acc)
        pa += BLOCK_K * stride_ak
        pb += BLOCK_K * stride_bk
        remaining -= BLOCK_K
    pc = c_ptr + rm[:, None] * stride_cm + rn[None, :] * stride_cn
    tl.store(pc, acc.to(c_ptr.dtype.element_ty), mask=(rm[:, None] < M) & (rn[None, :] < N))
""",
    },
    "h03": {
        "naive": """
    m = tl.program_id(0)
    n = tl.program_id(1)
    ks = tl.arange(0, BLOCK_K)
    partial = tl.zeros([BLOCK_K], tl.float32)
    k = 0
    while k < K:
        valid = (k + ks) < K
        lhs = tl.load(a_ptr + m * stride_am + (k + ks) * stride_ak, valid, 0.0)
        rhs = tl.load(b_ptr + (k + ks) * stride_bk + n * stride_bn, valid, 0.0)
        partial = partial + lhs.to(tl.float32) * rhs.to(tl.float32)
        k += BLOCK_K
    tl.store(c_ptr + m * stride_cm + n * stride_cn, tl.sum(partial, 0).to(c_ptr.dtype.element_ty))
""",
        "tiled": """
    i = tl.program_id(0) * BLOCK_M
    j = tl.program_id(1) * BLOCK_N
    im = i + tl.arange(0, BLOCK_M)
    jn = j + tl.arange(0, BLOCK_N)
    row_ok = im < M
    col_ok = jn < N
    c_blk = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        kk = k * BLOCK_K + tl.arange(0, BLOCK_K)
        k_ok = kk < K
        a_blk = tl.load(a_ptr + im[:, None] * stride_am + kk[None, :] * stride_ak,
                        row_ok[:, None] & k_ok[None, :], 0.0)
        b_blk = tl.load(b_ptr + kk[:, None] * stride_bk + jn[None, :] * stride_bn,
                        k_ok[:, None] & col_ok[None, :], 0.0)
        c_blk += tl.dot(a_blk, b_blk)
    tl.store(c_ptr + im[:, None] * stride_cm + jn[None, :] * stride_cn, c_blk.to(c_ptr.dtype.element_ty),
             row_ok[:, None] & col_ok[None, :])
""",
        "grouped": """
    flat = tl.program_id(0)
    rows_of_tiles = tl.cdiv(M, BLOCK_M)
    cols_of_tiles = tl.cdiv(N, BLOCK_N)
    per_group = GROUP_M * cols_of_tiles
    g = flat // per_group
    top = g * GROUP_M
    height = min(rows_of_tiles - top, GROUP_M)
    ti = top + (flat % per_group) % height
    tj = (flat % per_group) // height
    im = ti * BLOCK_M + tl.arange(0, BLOCK_M)
    jn = tj * BLOCK_N + tl.arange(0, BLOCK_N)
    row_ok = im < M
    col_ok = jn < N
    c_blk = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        kk = k * BLOCK_K + tl.arange(0, BLOCK_K)
        k_ok = kk < K
        if EVEN_K:
            a_blk = tl.load(a_ptr + im[:, None] * stride_am + kk[None, :] * stride_ak, row_ok[:, None], 0.0)
            b_blk = tl.load(b_ptr + kk[:, None] * stride_bk + jn[None, :] * stride_bn, col_ok[None, :], 0.0)
        else:
            a_blk = tl.load(a_ptr + im[:, None] * stride_am + kk[None, :] * stride_ak,
                            row_ok[:, None] & k_ok[None, :], 0.0)
            b_blk = tl.load(b_ptr + kk[:, None] * stride_bk + jn[None, :] * stride_bn,
                            k_ok[:, None] & col_ok[None, :], 0.0)
        c_blk += tl.dot(a_blk, b_blk)
    tl.store(c_ptr + im[:, None] * stride_cm + jn[None, :] * stride_cn, c_blk.to(c_ptr.dtype.element_ty),
             row_ok[:, None] & col_ok[None, :])
""",
    },
    "h04": {
        "naive": """
    out_i = tl.program_id(0)
    out_j = tl.program_id(1)
    lane = tl.arange(0, BLOCK_K)
    a_base = a_ptr + out_i * stride_am
    b_base = b_ptr + out_j * stride_bn
    s = tl.zeros((BLOCK_K,), tl.float32)
    for k0 in tl.range(0, K, BLOCK_K):
        idx = lane + k0
        s += tl.load(a_base + idx * stride_ak, mask=idx < K, other=0).to(tl.float32) * \\
             tl.load(b_base + idx * stride_bk, mask=idx < K, other=0).to(tl.float32)
    tl.store(c_ptr + out_i * stride_cm + out_j * stride_cn, tl.sum(s).to(c_ptr.dtype.element_ty))
""",
        "tiled": """
    tile_row, tile_col = tl.program_id(0), tl.program_id(1)
    m_idx = tl.arange(0, BLOCK_M) + tile_row * BLOCK_M
    n_idx = tl.arange(0, BLOCK_N) + tile_col * BLOCK_N
    k_idx = tl.arange(0, BLOCK_K)
    result = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)
    for k0 in tl.range(0, K, BLOCK_K):
        a_tile = tl.load(a_ptr + stride_am * m_idx[:, None] + stride_ak * (k0 + k_idx)[None, :],
                         mask=(m_idx < M)[:, None] & ((k0 + k_idx) < K)[None, :], other=0)
        b_tile = tl.load(b_ptr + stride_bk * (k0 + k_idx)[:, None] + stride_bn * n_idx[None, :],
                         mask=((k0 + k_idx) < K)[:, None] & (n_idx < N)[None, :], other=0)
        result = tl.dot(a_tile, b_tile, result)
    tl.store(c_ptr + stride_cm * m_idx[:, None] + stride_cn * n_idx[None, :], result.to(c_ptr.dtype.element_ty),
             mask=(m_idx < M)[:, None] & (n_idx < N)[None, :])
""",
        "grouped": """
    p = tl.program_id(0)
    grid_n = tl.cdiv(N, BLOCK_N)
    grid_m = tl.cdiv(M, BLOCK_M)
    tile_row, tile_col = tl.swizzle2d(p // grid_n, p % grid_n, grid_m, grid_n, GROUP_M)
    m_idx = tl.arange(0, BLOCK_M) + tile_row * BLOCK_M
    n_idx = tl.arange(0, BLOCK_N) + tile_col * BLOCK_N
    k_idx = tl.arange(0, BLOCK_K)
    result = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)
    for k0 in tl.range(0, K, BLOCK_K):
        a_tile = tl.load(a_ptr + stride_am * m_idx[:, None] + stride_ak * (k0 + k_idx)[None, :],
                         mask=(m_idx < M)[:, None] & ((k0 + k_idx) < K)[None, :], other=0)
        b_tile = tl.load(b_ptr + stride_bk * (k0 + k_idx)[:, None] + stride_bn * n_idx[None, :],
                         mask=((k0 + k_idx) < K)[:, None] & (n_idx < N)[None, :], other=0)
        result = tl.dot(a_tile, b_tile, result)
    tl.store(c_ptr + stride_cm * m_idx[:, None] + stride_cn * n_idx[None, :], result.to(c_ptr.dtype.element_ty),
             mask=(m_idx < M)[:, None] & (n_idx < N)[None, :])
""",
    },
    "h05": {
        "naive": """
    ij = tl.program_id(0), tl.program_id(1)
    acc = tl.zeros((BLOCK_K,), dtype=tl.float32)
    a_row_ptr = a_ptr + ij[0] * stride_am
    b_col_ptr = b_ptr + ij[1] * stride_bn
    for kb in range(tl.cdiv(K, BLOCK_K)):
        pos = kb * BLOCK_K + tl.arange(0, BLOCK_K)
        inside = pos < K
        prod = tl.load(a_row_ptr + pos * stride_ak, inside, 0.0).to(tl.float32)
        prod *= tl.load(b_col_ptr + pos * stride_bk, inside, 0.0).to(tl.float32)
        acc += prod
    tl.store(c_ptr + ij[0] * stride_cm + ij[1] * stride_cn, tl.sum(acc, 0).to(c_ptr.dtype.element_ty))
""",
        "tiled": """
    which_m = tl.program_id(0)
    which_n = tl.program_id(1)
    off_m = which_m * BLOCK_M + tl.arange(0, BLOCK_M)
    off_n = which_n * BLOCK_N + tl.arange(0, BLOCK_N)
    off_k = tl.arange(0, BLOCK_K)
    a_cur = a_ptr + off_m[:, None] * stride_am + off_k[None, :] * stride_ak
    b_cur = b_ptr + off_k[:, None] * stride_bk + off_n[None, :] * stride_bn
    m_in = off_m[:, None] < M
    n_in = off_n[None, :] < N
    accum = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for kb in range(tl.cdiv(K, BLOCK_K)):
        k_left = K - kb * BLOCK_K
        a_t = tl.load(a_cur, mask=m_in & (off_k[None, :] < k_left), other=0.0)
        b_t = tl.load(b_cur, mask=(off_k[:, None] < k_left) & n_in, other=0.0)
        accum += tl.dot(a_t, b_t)
        a_cur += BLOCK_K * stride_ak
        b_cur += BLOCK_K * stride_bk
    tl.store(c_ptr + off_m[:, None] * stride_cm + off_n[None, :] * stride_cn, accum.to(c_ptr.dtype.element_ty),
             mask=m_in & n_in)
""",
        "grouped": """
    lin = tl.program_id(0)
    mt = tl.cdiv(M, BLOCK_M)
    nt = tl.cdiv(N, BLOCK_N)
    group_tiles = nt * GROUP_M
    gfirst = (lin // group_tiles) * GROUP_M
    gsize = min(GROUP_M, mt - gfirst)
    local = lin % group_tiles
    which_m = gfirst + local % gsize
    which_n = local // gsize
    off_m = which_m * BLOCK_M + tl.arange(0, BLOCK_M)
    off_n = which_n * BLOCK_N + tl.arange(0, BLOCK_N)
    off_k = tl.arange(0, BLOCK_K)
    a_cur = a_ptr + off_m[:, None] * stride_am + off_k[None, :] * stride_ak
    b_cur = b_ptr + off_k[:, None] * stride_bk + off_n[None, :] * stride_bn
    m_in = off_m[:, None] < M
    n_in = off_n[None, :] < N
    accum = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for kb in range(tl.cdiv(K, BLOCK_K)):
        k_left = K - kb * BLOCK_K
        a_t = tl.load(a_cur, mask=m_in & (off_k[None, :] < k_left), other=0.0)
        b_t = tl.load(b_cur, mask=(off_k[:, None] < k_left) & n_in, other=0.0)
        accum += tl.dot(a_t, b_t)
        a_cur += BLOCK_K * stride_ak
        b_cur += BLOCK_K * stride_bk
    tl.store(c_ptr + off_m[:, None] * stride_cm + off_n[None, :] * stride_cn, accum.to(c_ptr.dtype.element_ty),
             mask=m_in & n_in)
""",
    },
    "h06": {
        "naive": """
    r, c = tl.program_id(0), tl.program_id(1)
    vec = tl.arange(0, BLOCK_K)
    dot = tl.zeros((BLOCK_K,), dtype=tl.float32)
    num_chunks = (K + BLOCK_K - 1) // BLOCK_K
    for chunk in range(num_chunks):
        kpos = chunk * BLOCK_K + vec
        guard = kpos < K
        arow = tl.load(a_ptr + r * stride_am + kpos * stride_ak, mask=guard, other=0.0)
        bcol = tl.load(b_ptr + c * stride_bn + kpos * stride_bk, mask=guard, other=0.0)
        dot = tl.fma(arow.to(tl.float32), bcol.to(tl.float32), dot)
    tl.store(c_ptr + r * stride_cm + c * stride_cn, tl.sum(dot, axis=0).to(c_ptr.dtype.element_ty))
""",
        "tiled": """
    r0 = tl.program_id(0) * BLOCK_M
    c0 = tl.program_id(1) * BLOCK_N
    rows = r0 + tl.arange(0, BLOCK_M)[:, None]
    cols = c0 + tl.arange(0, BLOCK_N)[None, :]
    kr = tl.arange(0, BLOCK_K)[None, :]
    kc = tl.arange(0, BLOCK_K)[:, None]
    total = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    num_chunks = (K + BLOCK_K - 1) // BLOCK_K
    for chunk in range(num_chunks):
        k0 = chunk * BLOCK_K
        left = tl.load(a_ptr + rows * stride_am + (k0 + kr) * stride_ak, mask=(rows < M) & (k0 + kr < K), other=0.0)
        right = tl.load(b_ptr + (k0 + kc) * stride_bk + cols * stride_bn, mask=(k0 + kc < K) & (cols < N), other=0.0)
        total = tl.dot(left, right, acc=total)
    tl.store(c_ptr + rows * stride_cm + cols * stride_cn, total.to(c_ptr.dtype.element_ty),
             mask=(rows < M) & (cols < N))
""",
        "grouped": """
    pid = tl.program_id(0)
    ntm = (M + BLOCK_M - 1) // BLOCK_M
    ntn = (N + BLOCK_N - 1) // BLOCK_N
    gid = pid // (GROUP_M * ntn)
    fm = gid * GROUP_M
    gm = tl.minimum(ntm - fm, GROUP_M)
    within = pid % (GROUP_M * ntn)
    r0 = (fm + within % gm) * BLOCK_M
    c0 = (within // gm) * BLOCK_N
    rows = r0 + tl.arange(0, BLOCK_M)[:, None]
    cols = c0 + tl.arange(0, BLOCK_N)[None, :]
    kr = tl.arange(0, BLOCK_K)[None, :]
    kc = tl.arange(0, BLOCK_K)[:, None]
    total = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    num_chunks = (K + BLOCK_K - 1) // BLOCK_K
    for chunk in range(num_chunks):
        k0 = chunk * BLOCK_K
        left = tl.load(a_ptr + rows * stride_am + (k0 + kr) * stride_ak, mask=(rows < M) & (k0 + kr < K), other=0.0)
        right = tl.load(b_ptr + (k0 + kc) * stride_bk + cols * stride_bn, mask=(k0 + kc < K) & (cols < N), other=0.0)
        total = tl.dot(left, right, acc=total)
    tl.store(c_ptr + rows * stride_cm + cols * stride_cn, total.to(c_ptr.dtype.element_ty),
             mask=(rows < M) & (cols < N))
""",
    },
    "h07": {
        "naive": """
    pid0 = tl.program_id(0)
    pid1 = tl.program_id(1)
    k_range = tl.arange(0, BLOCK_K)
    sums = tl.zeros((BLOCK_K,), tl.float32)
    k_off = 0
    for _ in range(0, tl.cdiv(K, BLOCK_K)):
        cur = k_off + k_range
        in_range = cur < K
        av = tl.load(a_ptr + pid0 * stride_am + cur * stride_ak, mask=in_range, other=0.0)
        bv = tl.load(b_ptr + cur * stride_bk + pid1 * stride_bn, mask=in_range, other=0.0)
        sums += av.to(tl.float32) * bv.to(tl.float32)
        k_off += BLOCK_K
    value = tl.sum(sums, axis=0)
    tl.store(c_ptr + pid0 * stride_cm + pid1 * stride_cn, value.to(c_ptr.dtype.element_ty))
""",
        "tiled": """
    bid_m = tl.program_id(0)
    bid_n = tl.program_id(1)
    am = tl.max_contiguous(tl.multiple_of(bid_m * BLOCK_M + tl.arange(0, BLOCK_M), BLOCK_M), BLOCK_M)
    bn = tl.max_contiguous(tl.multiple_of(bid_n * BLOCK_N + tl.arange(0, BLOCK_N), BLOCK_N), BLOCK_N)
    kk = tl.arange(0, BLOCK_K)
    acc_tile = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)
    for kt in range(0, tl.cdiv(K, BLOCK_K)):
        kcur = kt * BLOCK_K + kk
        at = tl.load(a_ptr + (am * stride_am)[:, None] + (kcur * stride_ak)[None, :],
                     mask=(am < M)[:, None] & (kcur < K)[None, :], other=0.0)
        bt = tl.load(b_ptr + (kcur * stride_bk)[:, None] + (bn * stride_bn)[None, :],
                     mask=(kcur < K)[:, None] & (bn < N)[None, :], other=0.0)
        acc_tile += tl.dot(at, bt, allow_tf32=False)
    cmask = (am < M)[:, None] & (bn < N)[None, :]
    tl.store(c_ptr + (am * stride_cm)[:, None] + (bn * stride_cn)[None, :], acc_tile.to(c_ptr.dtype.element_ty),
             mask=cmask)
""",
        "grouped": """
    t = tl.program_id(0)
    rows_t = tl.cdiv(M, BLOCK_M)
    cols_t = tl.cdiv(N, BLOCK_N)
    span = GROUP_M * cols_t
    g0 = (t // span) * GROUP_M
    gh = min(GROUP_M, rows_t - g0)
    bid_m = g0 + (t % span) % gh
    bid_n = (t % span) // gh
    am = bid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    bn = bid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    kk = tl.arange(0, BLOCK_K)
    acc_tile = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)
    for kt in range(0, tl.cdiv(K, BLOCK_K)):
        kcur = kt * BLOCK_K + kk
        at = tl.load(a_ptr + (am * stride_am)[:, None] + (kcur * stride_ak)[None, :],
                     mask=(am < M)[:, None] & (kcur < K)[None, :], other=0.0)
        bt = tl.load(b_ptr + (kcur * stride_bk)[:, None] + (bn * stride_bn)[None, :],
                     mask=(kcur < K)[:, None] & (bn < N)[None, :], other=0.0)
        acc_tile += tl.dot(at, bt)
    cmask = (am < M)[:, None] & (bn < N)[None, :]
    tl.store(c_ptr + (am * stride_cm)[:, None] + (bn * stride_cn)[None, :], acc_tile.to(c_ptr.dtype.element_ty),
             mask=cmask)
""",
    },
    "h08": {
        "naive": """
    m_id = tl.program_id(0)
    n_id = tl.program_id(1)
    a_start = a_ptr + m_id * stride_am
    b_start = b_ptr + n_id * stride_bn
    running = tl.zeros((BLOCK_K,), dtype=tl.float32)
    base = 0
    while base < K:
        ids = base + tl.arange(0, BLOCK_K)
        lhs = tl.where(ids < K, tl.load(a_start + ids * stride_ak, mask=ids < K), 0.0)
        rhs = tl.where(ids < K, tl.load(b_start + ids * stride_bk, mask=ids < K), 0.0)
        running += lhs.to(tl.float32) * rhs.to(tl.float32)
        base += BLOCK_K
    tl.store(c_ptr + m_id * stride_cm + n_id * stride_cn, tl.sum(running, axis=0).to(c_ptr.dtype.element_ty))
""",
        "tiled": """
    m_id = tl.program_id(0)
    n_id = tl.program_id(1)
    mm = m_id * BLOCK_M + tl.arange(0, BLOCK_M)
    nn = n_id * BLOCK_N + tl.arange(0, BLOCK_N)
    a_blk_ptr = tl.make_block_ptr(a_ptr, (M, K), (stride_am, stride_ak), (m_id * BLOCK_M, 0),
                                  (BLOCK_M, BLOCK_K), (1, 0))
    b_blk_ptr = tl.make_block_ptr(b_ptr, (K, N), (stride_bk, stride_bn), (0, n_id * BLOCK_N),
                                  (BLOCK_K, BLOCK_N), (1, 0))
    c_acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for _ in range(0, K, BLOCK_K):
        blk_a = tl.load(a_blk_ptr, boundary_check=(0, 1), padding_option="zero")
        blk_b = tl.load(b_blk_ptr, boundary_check=(0, 1), padding_option="zero")
        c_acc = tl.dot(blk_a, blk_b, c_acc)
        a_blk_ptr = tl.advance(a_blk_ptr, (0, BLOCK_K))
        b_blk_ptr = tl.advance(b_blk_ptr, (BLOCK_K, 0))
    tl.store(c_ptr + mm[:, None] * stride_cm + nn[None, :] * stride_cn, c_acc.to(c_ptr.dtype.element_ty),
             mask=(mm[:, None] < M) & (nn[None, :] < N))
""",
        "grouped": """
    pid = tl.program_id(0)
    n_tiles_m = tl.cdiv(M, BLOCK_M)
    n_tiles_n = tl.cdiv(N, BLOCK_N)
    m_id, n_id = tl.swizzle2d(pid // n_tiles_n, pid % n_tiles_n, n_tiles_m, n_tiles_n, GROUP_M)
    mm = m_id * BLOCK_M + tl.arange(0, BLOCK_M)
    nn = n_id * BLOCK_N + tl.arange(0, BLOCK_N)
    a_blk_ptr = tl.make_block_ptr(a_ptr, (M, K), (stride_am, stride_ak), (m_id * BLOCK_M, 0),
                                  (BLOCK_M, BLOCK_K), (1, 0))
    b_blk_ptr = tl.make_block_ptr(b_ptr, (K, N), (stride_bk, stride_bn), (0, n_id * BLOCK_N),
                                  (BLOCK_K, BLOCK_N), (1, 0))
    c_acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for _ in range(0, K, BLOCK_K):
        blk_a = tl.load(a_blk_ptr, boundary_check=(0, 1), padding_option="zero")
        blk_b = tl.load(b_blk_ptr, boundary_check=(0, 1), padding_option="zero")
        c_acc = tl.dot(blk_a, blk_b, c_acc)
        a_blk_ptr = tl.advance(a_blk_ptr, (0, BLOCK_K))
        b_blk_ptr = tl.advance(b_blk_ptr, (BLOCK_K, 0))
    tl.store(c_ptr + mm[:, None] * stride_cm + nn[None, :] * stride_cn, c_acc.to(c_ptr.dtype.element_ty),
             mask=(mm[:, None] < M) & (nn[None, :] < N))
""",
    },
    "h09": {
        "naive": """
    px = tl.program_id(0)
    py = tl.program_id(1)
    acc = tl.full((BLOCK_K,), 0.0, tl.float32)
    for kb in range(0, K, BLOCK_K):
        kv = tl.arange(0, BLOCK_K) + kb
        x = tl.load(a_ptr + px * stride_am + kv * stride_ak, mask=kv < K, other=0.0)
        w = tl.load(b_ptr + kv * stride_bk + py * stride_bn, mask=kv < K, other=0.0)
        acc = acc + x.to(tl.float32) * w.to(tl.float32)
    total = tl.sum(acc, axis=0)
    out_ptr = c_ptr + px * stride_cm + py * stride_cn
    tl.store(out_ptr, total.to(out_ptr.dtype.element_ty))
""",
        "tiled": """
    px = tl.program_id(0)
    py = tl.program_id(1)
    xs = px * BLOCK_M + tl.arange(0, BLOCK_M)
    ys = py * BLOCK_N + tl.arange(0, BLOCK_N)
    acc = tl.full((BLOCK_M, BLOCK_N), 0.0, tl.float32)
    for kb in range(0, K, BLOCK_K):
        kv = tl.arange(0, BLOCK_K) + kb
        inside_a = (xs[:, None] < M) & (kv[None, :] < K)
        lhs = tl.load(a_ptr + xs[:, None] * stride_am + kv[None, :] * stride_ak, mask=inside_a, other=0.0)
        rhs = tl.load(b_ptr + kv[:, None] * stride_bk + ys[None, :] * stride_bn,
                      mask=(kv[:, None] < K) & (ys[None, :] < N), other=0.0)
        acc += tl.dot(lhs, rhs)
    out = c_ptr + xs[:, None] * stride_cm + ys[None, :] * stride_cn
    tl.store(out, acc.to(c_ptr.dtype.element_ty), mask=(xs[:, None] < M) & (ys[None, :] < N))
""",
        "grouped": """
    pid = tl.program_id(0)
    tiles_x = tl.cdiv(M, BLOCK_M)
    tiles_y = tl.cdiv(N, BLOCK_N)
    cnt = GROUP_M * tiles_y
    grp = pid // cnt
    x0 = grp * GROUP_M
    sz = tl.minimum(tiles_x - x0, GROUP_M)
    px = x0 + (pid % cnt) % sz
    py = (pid % cnt) // sz
    xs = px * BLOCK_M + tl.arange(0, BLOCK_M)
    ys = py * BLOCK_N + tl.arange(0, BLOCK_N)
    acc = tl.full((BLOCK_M, BLOCK_N), 0.0, tl.float32)
    for kb in range(0, K, BLOCK_K):
        kv = tl.arange(0, BLOCK_K) + kb
        lhs = tl.load(a_ptr + xs[:, None] * stride_am + kv[None, :] * stride_ak,
                      mask=(xs[:, None] < M) & (kv[None, :] < K), other=0.0)
        rhs = tl.load(b_ptr + kv[:, None] * stride_bk + ys[None, :] * stride_bn,
                      mask=(kv[:, None] < K) & (ys[None, :] < N), other=0.0)
        acc += tl.dot(lhs, rhs)
    out = c_ptr + xs[:, None] * stride_cm + ys[None, :] * stride_cn
    tl.store(out, acc.to(c_ptr.dtype.element_ty), mask=(xs[:, None] < M) & (ys[None, :] < N))
""",
    },
    "h10": {
        "naive": """
    i, j = tl.program_id(0), tl.program_id(1)
    kk = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_K,), dtype=tl.float32)
    pa = a_ptr + i * stride_am + kk * stride_ak
    pb = b_ptr + j * stride_bn + kk * stride_bk
    for k_lo in range(0, K, BLOCK_K):
        m = kk < K - k_lo
        acc += tl.load(pa, mask=m, other=0.0).to(tl.float32) * tl.load(pb, mask=m, other=0.0).to(tl.float32)
        pa += BLOCK_K * stride_ak
        pb += BLOCK_K * stride_bk
    tl.store(c_ptr + i * stride_cm + j * stride_cn, tl.sum(acc, axis=0).to(c_ptr.dtype.element_ty))
""",
        "tiled": """
    i, j = tl.program_id(0), tl.program_id(1)
    ri = i * BLOCK_M + tl.arange(0, BLOCK_M)
    rj = j * BLOCK_N + tl.arange(0, BLOCK_N)
    kk = tl.arange(0, BLOCK_K)
    pa = a_ptr + ri[:, None] * stride_am + kk[None, :] * stride_ak
    pb = b_ptr + kk[:, None] * stride_bk + rj[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k_lo in range(0, K, BLOCK_K):
        ta = tl.load(pa, mask=(ri[:, None] < M) & (kk[None, :] < K - k_lo), other=0.0)
        tb = tl.load(pb, mask=(kk[:, None] < K - k_lo) & (rj[None, :] < N), other=0.0)
        acc += tl.dot(ta, tb)
        pa += BLOCK_K * stride_ak
        pb += BLOCK_K * stride_bk
    tl.store(c_ptr + ri[:, None] * stride_cm + rj[None, :] * stride_cn, acc.to(c_ptr.dtype.element_ty),
             mask=(ri[:, None] < M) & (rj[None, :] < N))
""",
        "grouped": """
    s = tl.program_id(0)
    tm = tl.cdiv(M, BLOCK_M)
    tn = tl.cdiv(N, BLOCK_N)
    i, j = tl.swizzle2d(s // tn, s % tn, tm, tn, GROUP_M)
    ri = i * BLOCK_M + tl.arange(0, BLOCK_M)
    rj = j * BLOCK_N + tl.arange(0, BLOCK_N)
    kk = tl.arange(0, BLOCK_K)
    pa = a_ptr + ri[:, None] * stride_am + kk[None, :] * stride_ak
    pb = b_ptr + kk[:, None] * stride_bk + rj[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k_lo in range(0, K, BLOCK_K):
        if EVEN_K:
            ta = tl.load(pa, mask=ri[:, None] < M, other=0.0)
            tb = tl.load(pb, mask=rj[None, :] < N, other=0.0)
        else:
            ta = tl.load(pa, mask=(ri[:, None] < M) & (kk[None, :] < K - k_lo), other=0.0)
            tb = tl.load(pb, mask=(kk[:, None] < K - k_lo) & (rj[None, :] < N), other=0.0)
        acc = tl.dot(ta, tb, acc)
        pa += BLOCK_K * stride_ak
        pb += BLOCK_K * stride_bk
    tl.store(c_ptr + ri[:, None] * stride_cm + rj[None, :] * stride_cn, acc.to(c_ptr.dtype.element_ty),
             mask=(ri[:, None] < M) & (rj[None, :] < N))
""",
    },
}
