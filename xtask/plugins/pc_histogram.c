/*
 * A QEMU TCG plugin for `cargo xtask count --breakdown`: how many times each instruction
 * address executed, exactly (an inline add per executed instruction, as QEMU's `insn` sample
 * plugin counts with inline=on). The xtask attributes the addresses to the parts of a token
 * through the firmware's DWARF (xtask/src/breakdown.rs).
 *
 * Written here because QEMU ships no plugin that counts every address: `hotblocks` keeps only
 * the hottest translation blocks, `insn` only totals. Compiled at test time against the
 * `qemu-plugin.h` of Debian's QEMU source package, which is not committed (xtask/src/insn.rs).
 *
 * Arguments: lo=HEX,hi=HEX (the firmware's code, a counter per 2 bytes, the smallest Thumb and
 * RISC-V C instruction; anything executed elsewhere goes to one counter) and out=PATH. At exit
 * it writes PATH (through PATH.tmp and a rename): a line `HEXADDR COUNT` per address that ran,
 * then `outside COUNT`; and it prints `total insns: N` to QEMU's log as `insn` does.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <qemu-plugin.h>

QEMU_PLUGIN_EXPORT int qemu_plugin_version = QEMU_PLUGIN_VERSION;

static struct qemu_plugin_scoreboard *counts;
static uint64_t lo, hi;
static size_t slots; /* counters of [lo, hi); counter `slots` is everything else */
static char out_path[4096];

static qemu_plugin_u64 counter(size_t slot)
{
    qemu_plugin_u64 entry = { counts, slot * sizeof(uint64_t) };
    return entry;
}

static void translated(qemu_plugin_id_t id, struct qemu_plugin_tb *tb)
{
    size_t n = qemu_plugin_tb_n_insns(tb);
    for (size_t i = 0; i < n; i++) {
        struct qemu_plugin_insn *insn = qemu_plugin_tb_get_insn(tb, i);
        uint64_t pc = qemu_plugin_insn_vaddr(insn);
        size_t slot = (pc >= lo && pc < hi) ? (size_t)((pc - lo) / 2) : slots;
        qemu_plugin_register_vcpu_insn_exec_inline_per_vcpu(
            insn, QEMU_PLUGIN_INLINE_ADD_U64, counter(slot), 1);
    }
}

static void finished(qemu_plugin_id_t id, void *unused)
{
    char tmp[sizeof(out_path) + 8];
    snprintf(tmp, sizeof(tmp), "%s.tmp", out_path);
    FILE *f = fopen(tmp, "w");
    uint64_t total = 0;
    for (size_t s = 0; s <= slots; s++) {
        uint64_t c = qemu_plugin_u64_sum(counter(s));
        total += c;
        if (f == NULL || c == 0) {
            continue;
        }
        if (s < slots) {
            fprintf(f, "%" PRIx64 " %" PRIu64 "\n", lo + 2 * (uint64_t)s, c);
        } else {
            fprintf(f, "outside %" PRIu64 "\n", c);
        }
    }
    char line[96];
    if (f == NULL || fclose(f) != 0 || rename(tmp, out_path) != 0) {
        snprintf(line, sizeof(line), "pc_histogram: cannot write the histogram (%s)\n",
                 strerror(errno));
        qemu_plugin_outs(line);
    }
    snprintf(line, sizeof(line), "total insns: %" PRIu64 "\n", total);
    qemu_plugin_outs(line);
    qemu_plugin_scoreboard_free(counts);
}

/* The value of `key=` in `arg`, or NULL. */
static const char *value_of(const char *arg, const char *key)
{
    size_t n = strlen(key);
    return strncmp(arg, key, n) == 0 && arg[n] == '=' ? arg + n + 1 : NULL;
}

QEMU_PLUGIN_EXPORT int qemu_plugin_install(qemu_plugin_id_t id, const qemu_info_t *info,
                                           int argc, char **argv)
{
    int have_lo = 0, have_hi = 0;
    out_path[0] = '\0';
    for (int i = 0; i < argc; i++) {
        const char *v;
        char *end;
        if ((v = value_of(argv[i], "lo")) != NULL) {
            lo = strtoull(v, &end, 16);
            have_lo = *v != '\0' && *end == '\0';
        } else if ((v = value_of(argv[i], "hi")) != NULL) {
            hi = strtoull(v, &end, 16);
            have_hi = *v != '\0' && *end == '\0';
        } else if ((v = value_of(argv[i], "out")) != NULL) {
            snprintf(out_path, sizeof(out_path), "%s", v);
        } else {
            fprintf(stderr, "pc_histogram: unknown argument %s (lo=HEX,hi=HEX,out=PATH)\n",
                    argv[i]);
            return -1;
        }
    }
    if (!have_lo || !have_hi || hi <= lo || hi - lo > (1u << 26) || out_path[0] == '\0') {
        fprintf(stderr, "pc_histogram: needs lo=HEX,hi=HEX (lo < hi, at most 64 MiB apart) "
                        "and out=PATH\n");
        return -1;
    }
    slots = (size_t)((hi - lo + 1) / 2);
    counts = qemu_plugin_scoreboard_new((slots + 1) * sizeof(uint64_t));
    qemu_plugin_register_vcpu_tb_trans_cb(id, translated);
    qemu_plugin_register_atexit_cb(id, finished, NULL);
    return 0;
}
