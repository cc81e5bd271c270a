// A C++ port of regal/sim/kernel.py's non-trace path (_run, _decode_placement and a one-thread
// batch loop), line by line: same data structures, same order of operations, same results (bit
// for bit; experiments/bench_sim_cpp.py checks that before it times anything). It exists only so
// the benchmark can compare the numba kernel with compiled C++ of the same algorithm in one run.
// If the kernel's rules change, this file must change with it. Byte type int32 (the caller
// checks that prepare() chose int32).
#include <cstdint>
#include <vector>

#define R __restrict__
#define U(x) ((uint64_t)(int64_t)(x))
#define INL static inline __attribute__((always_inline))

typedef int32_t B;  // byte type (int32 when every byte count fits, as in the bench graphs)
static const int64_t LIST_MAX = 16;  // kernel._LIST_MAX: results do not depend on it, speed does

// ---------------------------------------------------------------------------- heaps

INL void heap_push(int32_t* R items, double* R keys, int64_t off, int64_t size, int64_t item,
                   double key) {
    int64_t i = size;
    while (i > 0) {
        int64_t parent = (i - 1) >> 1;
        double pk = keys[U(off + parent)];
        if (key > pk || (key == pk && item < items[U(off + parent)])) {
            items[U(off + i)] = items[U(off + parent)];
            keys[U(off + i)] = pk;
            i = parent;
        } else {
            break;
        }
    }
    items[U(off + i)] = (int32_t)item;
    keys[U(off + i)] = key;
}

INL int64_t heap_pop(int32_t* R items, double* R keys, int64_t off, int64_t size) {
    int64_t top = items[U(off)];
    size -= 1;
    if (size > 0) {
        int64_t last = items[U(off + size)];
        double lk = keys[U(off + size)];
        int64_t i = 0;
        while (true) {
            int64_t child = 2 * i + 1;
            if (child >= size) break;
            int64_t c = items[U(off + child)];
            double ck = keys[U(off + child)];
            if (child + 1 < size) {
                int64_t r = items[U(off + child + 1)];
                double rk = keys[U(off + child + 1)];
                if (rk > ck || (rk == ck && r < c)) {
                    child += 1;
                    c = r;
                    ck = rk;
                }
            }
            if (ck > lk || (ck == lk && c < last)) {
                items[U(off + i)] = (int32_t)c;
                keys[U(off + i)] = ck;
                i = child;
            } else {
                break;
            }
        }
        items[U(off + i)] = (int32_t)last;
        keys[U(off + i)] = lk;
    }
    return top;
}

INL int64_t list_pop(int32_t* R items, double* R keys, int64_t off, int64_t size) {
    (void)keys;
    return items[U(off + size - 1)];
}

INL void list_push(int32_t* R items, double* R keys, int64_t off, int64_t size, int64_t item,
                   double key) {
    int64_t i = size;
    while (i > 0) {
        double pk = keys[U(off + i - 1)];
        int64_t pi = items[U(off + i - 1)];
        if (pk > key || (pk == key && pi < item)) {
            items[U(off + i)] = (int32_t)pi;
            keys[U(off + i)] = pk;
            i -= 1;
        } else {
            break;
        }
    }
    items[U(off + i)] = (int32_t)item;
    keys[U(off + i)] = key;
}

INL void ready_push(int32_t* R items, double* R keys, bool* R is_heap, int64_t k, int64_t off,
                    int64_t size, int64_t item, double key) {
    if (is_heap[U(k)]) {
        heap_push(items, keys, off, size, item, key);
    } else {
        list_push(items, keys, off, size, item, key);
        if (size + 1 > LIST_MAX) {
            for (int64_t i = 1; i < size + 1; i++)
                heap_push(items, keys, off, i, items[U(off + i)], keys[U(off + i)]);
            is_heap[U(k)] = true;
        }
    }
}

INL int64_t ready_pop(int32_t* R items, double* R keys, bool* R is_heap, int64_t k, int64_t off,
                      int64_t size) {
    if (is_heap[U(k)]) {
        if (size == 1) is_heap[U(k)] = false;
        return heap_pop(items, keys, off, size);
    }
    return list_pop(items, keys, off, size);
}

INL int64_t count_down(int64_t w, int64_t k, int32_t* R wait, int32_t* R items, double* R keys,
                       bool* R is_heap, const int32_t* R dev_off, int32_t* R dev_size,
                       const bool* R dev_busy, int32_t* R dirty_dev, int64_t n_dirty_dev,
                       const double* R prio) {
    int64_t left = (int64_t)wait[U(w)] - 1;
    wait[U(w)] = (int32_t)left;
    if (left == 0) {
        ready_push(items, keys, is_heap, k, dev_off[U(k)], dev_size[U(k)], w, prio[U(w)]);
        dev_size[U(k)] += 1;
        if (dev_size[U(k)] == 1 && !dev_busy[U(k)]) {
            dirty_dev[U(n_dirty_dev)] = (int32_t)k;
            n_dirty_dev += 1;
        }
    }
    return n_dirty_dev;
}

INL void event_push(double* R ev_time, int32_t* R ev_id, int64_t size, double time, int64_t item) {
    int64_t i = size;
    while (i > 0 && ev_time[U(i - 1)] < time) {
        ev_time[U(i)] = ev_time[U(i - 1)];
        ev_id[U(i)] = ev_id[U(i - 1)];
        i -= 1;
    }
    ev_time[U(i)] = time;
    ev_id[U(i)] = (int32_t)item;
}

// ---------------------------------------------------------------------------- memory

INL void release(int64_t c, B* R copy_state, int64_t* R live) {
    int64_t left = (int64_t)copy_state[U(4 * c)] - 1;
    copy_state[U(4 * c)] = (B)left;
    bool freed = left == 0;
    int64_t k = copy_state[U(4 * c + 1)];
    live[U(k)] -= (int64_t)copy_state[U(4 * c + 3)] * (int64_t)freed;
    int64_t h = copy_state[U(4 * c + 2)];
    if (h >= 0 && freed) {
        c = h;
        while (c >= 0) {
            left = (int64_t)copy_state[U(4 * c)] - 1;
            copy_state[U(4 * c)] = (B)left;
            if (left != 0) return;
            k = copy_state[U(4 * c + 1)];
            live[U(k)] -= copy_state[U(4 * c + 3)];
            c = copy_state[U(4 * c + 2)];
        }
    }
}

// ---------------------------------------------------------------------------- data

struct Static {
    const double* cost; const int64_t* pers; const int32_t* producer; const B* producer_bytes;
    const B* size; const int32_t* forever; const double* transfer_time; const int32_t* output_ptr;
    const int32_t* consumer; const int32_t* edge_position; const int32_t* csucc;
    const int32_t* wait0; const int32_t* alias_slot; const int32_t* edge_tensor;
    const int32_t* roots; const int32_t* num_outputs; const uint8_t* op_alias; const B* op_rec;
    int64_t n, t, e, nroots;
};

struct Work {
    std::vector<int32_t> wait, op_heap; std::vector<double> op_heap_key;
    std::vector<int32_t> dev_off, dev_size; std::vector<uint8_t> dev_busy;
    std::vector<int32_t> mark_t, mark_tr;
    std::vector<B> copy_state; std::vector<int32_t> next_reader, uin_copy;
    std::vector<int32_t> chan_off, chan_size, chan_heap; std::vector<double> chan_heap_key;
    std::vector<uint8_t> chan_busy; std::vector<int32_t> dirty_chan;
    std::vector<int32_t> dev; std::vector<int64_t> live;
    std::vector<double> ev_time; std::vector<int32_t> ev_id;
    std::vector<int32_t> out_count, dirty_dev; std::vector<uint8_t> dev_heap;
    std::vector<int32_t> mark_last;
};

// _alloc_work(S, d, trace=False)
static void alloc_work(const Static& S, int64_t d, Work& W) {
    int64_t n = S.n, t = S.t, e = S.e, dd = d * d;
    W.wait.resize(n); W.op_heap.resize(n); W.op_heap_key.resize(n);
    W.dev_off.resize(d + 1); W.dev_size.resize(d); W.dev_busy.resize(d);
    W.mark_t.resize(d); W.mark_tr.resize(d);
    W.copy_state.resize(4 * (t + e));
    for (int64_t T = 0; T < t; T++) {
        W.copy_state[4 * T + 2] = -1;
        W.copy_state[4 * T + 3] = S.producer_bytes[T];
    }
    for (int64_t r = 0; r < e; r++) {
        W.copy_state[4 * (t + r) + 2] = -1;
        W.copy_state[4 * (t + r) + 3] = S.size[S.edge_tensor[r]];
    }
    W.next_reader.resize(e); W.uin_copy.resize(e);
    W.chan_off.resize(dd + 1); W.chan_size.resize(dd); W.chan_heap.resize(d * t);
    W.chan_heap_key.resize(d * t); W.chan_busy.resize(dd); W.dirty_chan.resize(dd);
    W.dev.resize(n); W.live.resize(d); W.ev_time.resize(dd); W.ev_id.resize(dd);
    W.out_count.resize(d); W.dirty_dev.resize(d); W.dev_heap.resize(d); W.mark_last.resize(d);
}

// ---------------------------------------------------------------------------- one individual

// noinline like numba, where _run is a separate function called by evaluate_batch's loop
__attribute__((noinline)) static double run(const Static& S, int64_t d, const int32_t* R dev, const double* R prio,
                  const double* R tprio, Work& W, int64_t* R peak) {
    const double* R cost = S.cost; const int64_t* R pers = S.pers;
    const B* R size = S.size; const int32_t* R forever = S.forever;
    const double* R transfer_time = S.transfer_time; const int32_t* R output_ptr = S.output_ptr;
    const int32_t* R consumer = S.consumer; const int32_t* R edge_position = S.edge_position;
    const int32_t* R csucc = S.csucc; const int32_t* R wait0 = S.wait0;
    const int32_t* R alias_slot = S.alias_slot; const int32_t* R edge_tensor = S.edge_tensor;
    const int32_t* R roots = S.roots; const int32_t* R num_outputs = S.num_outputs;
    const uint8_t* R op_alias = S.op_alias; const B* R op_rec = S.op_rec;

    int32_t* R wait = W.wait.data(); int32_t* R op_heap = W.op_heap.data();
    double* R op_heap_key = W.op_heap_key.data(); int32_t* R dev_off = W.dev_off.data();
    int32_t* R dev_size = W.dev_size.data(); bool* R dev_busy = (bool*)W.dev_busy.data();
    int32_t* R mark_t = W.mark_t.data(); int32_t* R mark_tr = W.mark_tr.data();
    B* R copy_state = W.copy_state.data(); int32_t* R next_reader = W.next_reader.data();
    int32_t* R uin_copy = W.uin_copy.data(); int32_t* R chan_off = W.chan_off.data();
    int32_t* R chan_size = W.chan_size.data(); int32_t* R chan_heap = W.chan_heap.data();
    double* R chan_heap_key = W.chan_heap_key.data(); bool* R chan_busy = (bool*)W.chan_busy.data();
    int32_t* R dirty_chan = W.dirty_chan.data(); int64_t* R live = W.live.data();
    double* R ev_time = W.ev_time.data(); int32_t* R ev_id = W.ev_id.data();
    int32_t* R out_count = W.out_count.data(); int32_t* R dirty_dev = W.dirty_dev.data();
    bool* R dev_heap = (bool*)W.dev_heap.data(); int32_t* R mark_last = W.mark_last.data();

    const int64_t n = S.n;
    const int64_t t = S.t;
    const int64_t dd = d * d;

    for (int64_t k = 0; k < d + 1; k++) dev_off[U(k)] = 0;
    for (int64_t k = 0; k < d; k++) {
        live[U(k)] = 0;
        out_count[U(k)] = 0;
    }
    for (int64_t v = 0; v < n; v++) {
        int64_t k = dev[U(v)];
        dev_off[U(k + 1)] += 1;
        out_count[U(k)] += num_outputs[U(v)];
        live[U(k)] += pers[U(v)];
    }
    for (int64_t k = 0; k < d; k++) {
        dev_off[U(k + 1)] += dev_off[U(k)];
        dev_size[U(k)] = 0;
        dev_busy[U(k)] = false;
        dev_heap[U(k)] = false;
        mark_t[U(k)] = -1;
        peak[U(k)] = live[U(k)];
    }
    int64_t base = 0;
    for (int64_t p = 0; p < d; p++) {
        for (int64_t q = 0; q < d; q++) {
            chan_off[U(p * d + q)] = (int32_t)base;
            chan_size[U(p * d + q)] = 0;
            chan_busy[U(p * d + q)] = false;
            base += out_count[U(p)];
        }
    }
    chan_off[U(dd)] = (int32_t)base;

    for (int64_t T = 0; T < t; T++) copy_state[U(4 * T)] = forever[U(T)];
    for (int64_t v = 0; v < n; v++) wait[U(v)] = wait0[U(v)];
    for (int64_t i = 0; i < S.nroots; i++) {
        int64_t v = roots[U(i)];
        int64_t k = dev[U(v)];
        ready_push(op_heap, op_heap_key, dev_heap, k, dev_off[U(k)], dev_size[U(k)], v,
                   prio[U(v)]);
        dev_size[U(k)] += 1;
    }
    int64_t n_dirty_dev = 0;
    for (int64_t k = 0; k < d; k++) {
        if (dev_size[U(k)] > 0) {
            dirty_dev[U(n_dirty_dev)] = (int32_t)k;
            n_dirty_dev += 1;
        }
    }

    int64_t nev = 0;
    int64_t n_dirty_chan = 0;
    int64_t done = 0;
    double now = 0.0;
    while (true) {
        // (b) idle devices start their best ready op, idle channels their best transfer
        for (int64_t i = 0; i < n_dirty_dev; i++) {
            int64_t k = dirty_dev[U(i)];
            if (!dev_busy[U(k)] && dev_size[U(k)] > 0) {
                int64_t v = ready_pop(op_heap, op_heap_key, dev_heap, k, dev_off[U(k)],
                                      dev_size[U(k)]);
                dev_size[U(k)] -= 1;
                dev_busy[U(k)] = true;
                int64_t x = live[U(k)] + (int64_t)op_rec[U(8 * v + 6)] + (int64_t)op_rec[U(8 * v + 7)];
                live[U(k)] = x;
                peak[U(k)] = peak[U(k)] > x ? peak[U(k)] : x;
                event_push(ev_time, ev_id, nev, now + cost[U(v)], v);
                nev += 1;
            }
        }
        for (int64_t i = 0; i < n_dirty_chan; i++) {
            int64_t c = dirty_chan[U(i)];
            if (chan_size[U(c)] > 0 && !chan_busy[U(c)]) {
                int64_t tr = heap_pop(chan_heap, chan_heap_key, chan_off[U(c)], chan_size[U(c)]);
                chan_size[U(c)] -= 1;
                chan_busy[U(c)] = true;
                int64_t k = copy_state[U(4 * (t + tr) + 1)];
                int64_t T = edge_tensor[U(tr)];
                int64_t x = live[U(k)] + (int64_t)size[U(T)];
                live[U(k)] = x;
                peak[U(k)] = peak[U(k)] > x ? peak[U(k)] : x;
                event_push(ev_time, ev_id, nev, now + transfer_time[U(T)], n + tr);
                nev += 1;
            }
        }
        n_dirty_chan = 0;
        n_dirty_dev = 0;

        if (nev == 0) break;
        // (a) everything that finishes at the next instant finishes, with its frees
        now = ev_time[U(nev - 1)];
        while (nev > 0 && ev_time[U(nev - 1)] == now) {
            int64_t item = ev_id[U(nev - 1)];  // _event_pop
            nev -= 1;
            if (item < n) {
                int64_t v = item;
                int64_t k = dev[U(v)];
                done += 1;
                dev_busy[U(k)] = false;
                if (dev_size[U(k)] > 0) {
                    dirty_dev[U(n_dirty_dev)] = (int32_t)k;
                    n_dirty_dev += 1;
                }
                bool fast = (nev == 0 || ev_time[U(nev - 1)] != now);
                live[U(k)] -= op_rec[U(8 * v + 6)];
                for (int64_t j = op_rec[U(8 * v)]; j < op_rec[U(8 * v + 1)]; j++) {
                    int64_t T = edge_tensor[U(j)];
                    copy_state[U(4 * T + 1)] = (B)k;
                    int64_t w = consumer[U(j)];
                    int64_t kw = dev[U(w)];
                    if (kw == k) {
                        uin_copy[U(edge_position[U(j)])] = (int32_t)T;
                        copy_state[U(4 * T)] += 1;
                        n_dirty_dev = count_down(w, k, wait, op_heap, op_heap_key, dev_heap,
                                                 dev_off, dev_size, dev_busy, dirty_dev,
                                                 n_dirty_dev, prio);
                    } else {
                        next_reader[U(j)] = -1;
                        if (mark_t[U(kw)] != T) {
                            mark_t[U(kw)] = (int32_t)T;
                            mark_tr[U(kw)] = (int32_t)j;
                            copy_state[U(4 * T)] += 1;
                            copy_state[U(4 * (t + j) + 1)] = (B)kw;
                            copy_state[U(4 * (t + j))] = 0;
                            int64_t c = k * d + kw;
                            double te = now + transfer_time[U(T)];
                            if (fast && !chan_busy[U(c)] && chan_size[U(c)] == 0 && te != now) {
                                chan_busy[U(c)] = true;
                                int64_t x = live[U(kw)] + (int64_t)size[U(T)];
                                live[U(kw)] = x;
                                peak[U(kw)] = peak[U(kw)] > x ? peak[U(kw)] : x;
                                event_push(ev_time, ev_id, nev, te, n + j);
                                nev += 1;
                            } else {
                                heap_push(chan_heap, chan_heap_key, chan_off[U(c)],
                                          chan_size[U(c)], j, tprio[U(v)]);
                                chan_size[U(c)] += 1;
                                if (!chan_busy[U(c)] && chan_size[U(c)] == 1) {
                                    dirty_chan[U(n_dirty_chan)] = (int32_t)c;
                                    n_dirty_chan += 1;
                                }
                            }
                        } else {
                            next_reader[U(mark_last[U(kw)])] = (int32_t)j;
                        }
                        mark_last[U(kw)] = (int32_t)j;
                        int64_t r = t + mark_tr[U(kw)];
                        copy_state[U(4 * r)] += 1;
                        uin_copy[U(edge_position[U(j)])] = (int32_t)r;
                    }
                }
                if (op_alias[U(v)]) {
                    for (int64_t T = output_ptr[U(v)]; T < output_ptr[U(v + 1)]; T++) {
                        int64_t s = alias_slot[U(T)];
                        if (s >= 0) {
                            copy_state[U(4 * T + 1)] = (B)k;
                            int64_t h = uin_copy[U(s)];
                            copy_state[U(4 * h)] += 1;
                            copy_state[U(4 * T + 2)] = (B)h;
                        }
                    }
                }
                for (int64_t j = op_rec[U(8 * v + 4)]; j < op_rec[U(8 * v + 5)]; j++) {
                    int64_t w = csucc[U(j)];
                    n_dirty_dev = count_down(w, dev[U(w)], wait, op_heap, op_heap_key, dev_heap,
                                             dev_off, dev_size, dev_busy, dirty_dev,
                                             n_dirty_dev, prio);
                }
                for (int64_t j = op_rec[U(8 * v + 2)]; j < op_rec[U(8 * v + 3)]; j++) {
                    release(uin_copy[U(j)], copy_state, live);
                }
            } else {
                int64_t tr = item - n;
                int64_t T = edge_tensor[U(tr)];
                int64_t k = copy_state[U(4 * (t + tr) + 1)];
                int64_t c = (int64_t)copy_state[U(4 * T + 1)] * d + k;
                chan_busy[U(c)] = false;
                if (chan_size[U(c)] > 0) {
                    dirty_chan[U(n_dirty_chan)] = (int32_t)c;
                    n_dirty_chan += 1;
                }
                release(T, copy_state, live);
                int64_t j = tr;
                while (j >= 0) {
                    int64_t w = consumer[U(j)];
                    j = next_reader[U(j)];
                    n_dirty_dev = count_down(w, k, wait, op_heap, op_heap_key, dev_heap,
                                             dev_off, dev_size, dev_busy, dirty_dev,
                                             n_dirty_dev, prio);
                }
            }
        }
    }
    if (done != n) return -1.0;
    return now;
}

INL void decode_placement(const double* R row, int64_t n, int64_t d, int32_t* R dev) {
    for (int64_t v = 0; v < n; v++) {
        int64_t base = v * d;
        int64_t best = 0;
        double best_key = row[U(base)];
        for (int64_t k = 1; k < d; k++) {
            if (row[U(base + k)] > best_key) {
                best_key = row[U(base + k)];
                best = k;
            }
        }
        dev[U(v)] = (int32_t)best;
    }
}

// ptrs: the 18 arrays of prepare() in order; lens: n, t, e, len(roots)
extern "C" void evaluate_serial(void** ptrs, const int64_t* lens, int64_t d, const double* keys,
                                int64_t pop, int64_t* peaks, double* makespans) {
    Static S;
    S.cost = (const double*)ptrs[0]; S.pers = (const int64_t*)ptrs[1];
    S.producer = (const int32_t*)ptrs[2]; S.producer_bytes = (const B*)ptrs[3];
    S.size = (const B*)ptrs[4]; S.forever = (const int32_t*)ptrs[5];
    S.transfer_time = (const double*)ptrs[6]; S.output_ptr = (const int32_t*)ptrs[7];
    S.consumer = (const int32_t*)ptrs[8]; S.edge_position = (const int32_t*)ptrs[9];
    S.csucc = (const int32_t*)ptrs[10]; S.wait0 = (const int32_t*)ptrs[11];
    S.alias_slot = (const int32_t*)ptrs[12]; S.edge_tensor = (const int32_t*)ptrs[13];
    S.roots = (const int32_t*)ptrs[14]; S.num_outputs = (const int32_t*)ptrs[15];
    S.op_alias = (const uint8_t*)ptrs[16]; S.op_rec = (const B*)ptrs[17];
    S.n = lens[0]; S.t = lens[1]; S.e = lens[2]; S.nroots = lens[3];
    Work W;
    alloc_work(S, d, W);
    const int64_t n = S.n, row_len = S.n * (d + 2);
    int32_t* dev = W.dev.data();
    for (int64_t i = 0; i < pop; i++) {
        const double* row = keys + i * row_len;
        decode_placement(row, n, d, dev);
        makespans[i] = run(S, d, dev, row + n * d, row + n * d + n, W, peaks + i * d);
    }
}
