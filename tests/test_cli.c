/* test_cli.c — the headroom command as a user meets it: every bad input gets
 * a clear message and its exit status, training resumes bit-identically, a
 * finished run resumed says so, a NaN stops the run with the last checkpoint
 * intact and names where it came from. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "io/io.h"

static char tmp[256];
static char out[65536];

/* Runs a shell command, captures stdout+stderr into out, returns the exit code. */
static int sh(const char *fmt, ...) {
    char cmd[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    char full[4400];
    snprintf(full, sizeof full, "(%s) 2>&1", cmd);
    FILE *p = popen(full, "r");
    size_t n = p ? fread(out, 1, sizeof out - 1, p) : 0;
    out[n] = 0;
    int st = p ? pclose(p) : -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
}

static void write_file(const char *name, const char *text) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", tmp, name);
    FILE *f = fopen(path, "w");
    fputs(text, f);
    fclose(f);
}

/* The headroom under test: -DHR='"/path/headroom"', else the one of this
 * test's own build (BUILD/tests/test_cli -> BUILD/headroom), which main puts
 * in the shell variable HR_BIN (unless it is set already). */
#ifndef HR
#define HR "\"$HR_BIN\""
#define HR_OF_THIS_BUILD 1
#endif
#define EXPECT(code, needle, ...)                                                                              \
    do {                                                                                                       \
        int rc_ = sh(__VA_ARGS__);                                                                             \
        CHECK(rc_ == (code), "exit %d (expected %d) for: %s\n%s", rc_, code, #__VA_ARGS__, out);              \
        CHECK(strstr(out, needle) != NULL, "output lacks \"%s\" for: %s\n%s", needle, #__VA_ARGS__, out);      \
        CHECK(rc_ < 128, "crashed (signal %d)", rc_ - 128);                                                    \
    } while (0)

static const char *tiny =
    "input 1 8 8\n"
    "Conv2d(1, 4, 3, padding=1)\n"
    "BatchNorm2d(4)\n"
    "ReLU()\n"
    "MaxPool2d(2)\n"
    "Flatten()\n"
    "Linear(64, 16)\n"
    "ReLU()\n"
    "Dropout(0.2)\n"
    "Linear(16, 5)\n"
    "loss CrossEntropyLoss\n";

static void test_model_files(void) {
    EXPECT(1, "nosuch.model", HR " plan %s/nosuch.model --batch 4", tmp);
    write_file("empty.model", "");
    EXPECT(1, "empty.model", HR " plan %s/empty.model --batch 4", tmp);
    write_file("garbage.model", "\x7f" "ELF\x01\x02 binary junk {{{\n");
    EXPECT(1, "garbage.model:1", HR " plan %s/garbage.model --batch 4", tmp);
    write_file("unknown.model", "input 3 8 8\nConv3d(3, 4, 3)\nloss CrossEntropyLoss\n");
    EXPECT(1, "unknown.model:2", HR " plan %s/unknown.model --batch 4", tmp);
    write_file("badarg.model", "input 10\nLinear(10, 5, biass=False)\nloss CrossEntropyLoss\n");
    EXPECT(1, "biass", HR " plan %s/badarg.model --batch 4", tmp);
    write_file("zero.model", "input 10\nLinear(10, 0)\nloss CrossEntropyLoss\n");
    EXPECT(1, "zero.model:2", HR " plan %s/zero.model --batch 4", tmp);
    write_file("neg.model", "input 3 8 8\nConv2d(3, -4, 3)\nloss CrossEntropyLoss\n");
    EXPECT(1, "neg.model:2", HR " plan %s/neg.model --batch 4", tmp);
    EXPECT(1, "8192", HR " plan examples/deep_cnn_broken.model --batch 4");
    CHECK(strstr(out, "2048") != NULL, "the broken DeepCNN message names 2048:\n%s", out);
}

static void test_batches(void) {
    EXPECT(2, "--batch", HR " plan examples/mlp.model --batch 0");
    EXPECT(2, "--batch", HR " plan examples/mlp.model --batch -3");
    EXPECT(2, "--batch", HR " plan examples/mlp.model --batch -1"); /* not the default's mark */
    EXPECT(2, "--precision", HR " plan examples/mlp.model --precision fp8");
    EXPECT(2, "--accumulate", HR " plan examples/mlp.model --accumulate 0");
    EXPECT(1, "multiple of --accumulate", HR " plan examples/mlp.model --batch 100 --accumulate 3");
    EXPECT(2, "--loss-scale", HR " train examples/mlp.model --precision fp16 --loss-scale inf");
    EXPECT(2, "not an integer", HR " plan examples/mlp.model --batch lots");
    /* a --save that cannot be written is refused before any training */
    EXPECT(1, "make the directory", HR " train examples/mlp.model --data synthetic --save /nonexistent_dir/x.ckpt");
    EXPECT(1, "is a directory", HR " train examples/mlp.model --data synthetic --save /tmp");
    /* a batch of 10^12 plans (petabytes) without allocating it */
    EXPECT(0, "PiB", HR " plan examples/mlp.model --batch 1000000000000");
    EXPECT(3, "largest batch that fits", HR " plan examples/mlp.model --batch 1000000000000 --budget 8GiB");
    EXPECT(0, "\"arena_bytes\"", HR " plan examples/simple_cnn.model --batch 128 --json");
    /* the first layers in slices: asked for, refused where they cannot be, offered where they help */
    EXPECT(0, "slices: the first 11 layers run on 8 slices of 32 samples", HR " plan examples/deep_cnn.model --batch 256 --chunks 8");
    EXPECT(2, "--chunks", HR " plan examples/mlp.model --chunks 0");
    EXPECT(1, "--chunks is for training", HR " plan examples/mlp.model --mode infer --chunks 4");
    EXPECT(0, "with --chunks 64", HR " plan examples/deep_cnn.model --batch 64 --budget 2GiB");
    EXPECT(0, "made no slices", HR " plan examples/simple_cnn.model --batch 1 --chunks 4");
    EXPECT(0, "run on 4 slices of 8 samples",
           HR " train examples/deep_cnn.model --data synthetic --samples 128 --batch 32 --chunks 4 --epochs 1 --device cpu");
    EXPECT(0, "memory drawn in", HR " plan examples/deep_cnn.model --batch 64 --chunks 4 --html %s/sliced.html", tmp);
    EXPECT(0, "inference", HR " plan examples/simple_cnn.model --batch 128 --mode infer");
    write_file("tiny.model", tiny);
    EXPECT(2, "larger than the training set",
           HR " train %s/tiny.model --data synthetic --samples 100 --batch 1000 --epochs 1 --device cpu", tmp);
    EXPECT(2, "unknown option", HR " train %s/tiny.model --bogus", tmp);
    /* integer labels must never be read as an MSE model's float targets */
    write_file("mse.model", "input 4\nLinear(4, 3)\nloss MSELoss\n");
    EXPECT(1, "CrossEntropyLoss", HR " train %s/mse.model --data synthetic --samples 64 --batch 8 --device cpu", tmp);
}

static void test_data_files(void) {
    char dir[300];
    snprintf(dir, sizeof dir, "%s/fm", tmp);
    mkdir(dir, 0755);
    const char *src = "/usr/share/datasets/fashion-mnist";
    struct stat st;
    if (stat(src, &st) != 0) {
        printf("test_cli: %s missing; skipping the data-file cases\n", src);
        return;
    }
    write_file("fm.model", "input 1 28 28\nFlatten()\nLinear(784, 10)\nloss CrossEntropyLoss\n");
    /* truncated train images */
    sh("cp %s/*.gz %s/ && head -c 1000000 %s/train-images-idx3-ubyte.gz > %s/t && mv %s/t %s/train-images-idx3-ubyte.gz",
       src, dir, src, dir, dir, dir);
    EXPECT(1, "train-images-idx3-ubyte", HR " train %s/fm.model --data %s --epochs 1 --device cpu", tmp, dir);
    /* wrong magic: a labels file where images belong */
    sh("cp %s/train-labels-idx1-ubyte.gz %s/train-images-idx3-ubyte.gz", src, dir);
    EXPECT(1, "magic", HR " train %s/fm.model --data %s --epochs 1 --device cpu", tmp, dir);
    /* a label out of range: byte 8 of the raw labels file is the first label */
    sh("cp %s/train-images-idx3-ubyte.gz %s/ && zcat %s/train-labels-idx1-ubyte.gz > %s/raw && printf '\\x0c' | "
       "dd of=%s/raw bs=1 seek=8 conv=notrunc 2>/dev/null && gzip -c %s/raw > %s/train-labels-idx1-ubyte.gz",
       src, dir, src, dir, dir, dir, dir);
    EXPECT(1, "label", HR " train %s/fm.model --data %s --epochs 1 --device cpu", tmp, dir);
    /* the model's input does not match the data */
    EXPECT(1, "input", HR " train examples/simple_cnn.model --data fashion-mnist --epochs 1 --device cpu");
}

static int cmp_files(const char *a, const char *b) {
    return sh("cmp -s %s %s", a, b);
}

static void test_checkpoints(void) {
    write_file("tiny.model", tiny);
    const char *common = "--data synthetic --samples 256 --batch 16 --epochs 3 --device cpu --seed 7 -q";
    /* uninterrupted: 3 epochs of 16 batches */
    EXPECT(0, "epoch 3/3", HR " train %s/tiny.model %s --save %s/full.ckpt", tmp, common, tmp);
    /* interrupted at step 21 (mid epoch 2), then resumed */
    EXPECT(0, "stopped after 21 steps", HR " train %s/tiny.model %s --save %s/part.ckpt --max-steps 21", tmp, common, tmp);
    EXPECT(0, "resumed from", HR " train %s/tiny.model %s --resume %s/part.ckpt --save %s/part.ckpt", tmp, common, tmp,
           tmp);
    char a[300], b[300];
    snprintf(a, sizeof a, "%s/full.ckpt", tmp);
    snprintf(b, sizeof b, "%s/part.ckpt", tmp);
    CHECK(cmp_files(a, b) == 0, "a run resumed at step 21 must end bit-identical to the uninterrupted run");
    /* resuming under another seed would silently continue another run */
    EXPECT(2, "--seed 7", HR " train %s/tiny.model --data synthetic --samples 256 --batch 16 --epochs 4 --device cpu "
                          "--seed 8 -q --resume %s/full.ckpt", tmp, tmp);
    /* eval reads it */
    EXPECT(0, "confusion matrix", HR " eval %s/tiny.model --weights %s --data synthetic --samples 256 --device cpu", tmp, a);
    /* PyTorch-style names in the file: parse the safetensors header with Python's json */
    if (sh("command -v python3") == 0) {
        EXPECT(0, "0.weight", "python3 -c \"import json,struct,sys; f=open('%s','rb'); n=struct.unpack('<Q',f.read(8))[0]; "
                              "h=json.loads(f.read(n)); print(sorted(k for k in h if not k.startswith('optim.')))\"",
               a);
    }
    /* a checkpoint of another model */
    write_file("other.model", "input 1 8 8\nFlatten()\nLinear(64, 5)\nloss CrossEntropyLoss\n");
    EXPECT(1, "full.ckpt", HR " train %s/other.model %s --resume %s", tmp, common, a);
    /* corrupt checkpoints: header length past the end, bad JSON, truncated data */
    sh("printf '\\xff\\xff\\xff\\x00\\x00\\x00\\x00\\x00{}' > %s/huge.ckpt", tmp);
    EXPECT(1, "huge.ckpt", HR " eval %s/tiny.model --weights %s/huge.ckpt --data synthetic --device cpu", tmp, tmp);
    sh("printf '\\x08\\x00\\x00\\x00\\x00\\x00\\x00\\x00{\"a\":1,' > %s/json.ckpt", tmp);
    EXPECT(1, "json.ckpt", HR " eval %s/tiny.model --weights %s/json.ckpt --data synthetic --device cpu", tmp, tmp);
    sh("head -c 2000 %s > %s/trunc.ckpt", a, tmp);
    EXPECT(1, "trunc.ckpt", HR " eval %s/tiny.model --weights %s/trunc.ckpt --data synthetic --device cpu", tmp, tmp);
    EXPECT(1, "nosuch.ckpt", HR " eval %s/tiny.model --weights %s/nosuch.ckpt --data synthetic --device cpu", tmp, tmp);
}

static void test_nan(void) {
    write_file("tiny.model", tiny);
    const char *common = "--data synthetic --samples 256 --batch 16 --device cpu --seed 7 -q";
    EXPECT(0, "epoch 1/1", HR " train %s/tiny.model %s --epochs 1 --save %s/good.ckpt", tmp, common, tmp);
    sh("cp %s/good.ckpt %s/good.copy", tmp, tmp);
    /* an absurd learning rate: the loss blows up; the checkpoint written before
     * stays; the message names the step, the op's layer (line 7 of the model
     * file, the first Linear), its tensor and the cause */
    EXPECT(4, "stopped before its update", HR " train %s/tiny.model %s --epochs 3 --lr 1e30 --optim sgd --save "
                                           "%s/nan.ckpt --resume %s/good.ckpt", tmp, common, tmp, tmp);
    const char *want[] = {"the loss is NaN at step 18 (epoch 2, batch 2)", "tiny.model:7: layer 5 (Linear)",
                          "in tensor 5.out", "whose inputs were finite", "grew past float32's range after a finite loss",
                          "--lr (now 1e+30)"};
    for (size_t i = 0; i < sizeof want / sizeof *want; i++)
        CHECK(strstr(out, want[i]) != NULL, "the NaN message lacks \"%s\":\n%s", want[i], out);
    char a[300], b[300];
    snprintf(a, sizeof a, "%s/good.ckpt", tmp);
    snprintf(b, sizeof b, "%s/good.copy", tmp);
    CHECK(cmp_files(a, b) == 0, "the good checkpoint is untouched");
    /* fp16 overflows at 65504: the advice is bf16 */
    EXPECT(4, "fp16 ends at 65504: train with --precision bf16",
           HR " train %s/tiny.model %s --epochs 3 --lr 1e4 --optim sgd --precision fp16", tmp, common);
    CHECK(strstr(out, "step 2 ") && strstr(out, "layer 5 (Linear)"), "the fp16 NaN message:\n%s", out);
}

/* Resuming a run that has done its epochs trains nothing, says so and
 * leaves the checkpoint as it was. */
static void test_resume_finished(void) {
    write_file("tiny.model", tiny);
    const char *common = "--data synthetic --samples 256 --batch 16 --device cpu --seed 7 -q";
    EXPECT(0, "epoch 2/2", HR " train %s/tiny.model %s --epochs 2 --save %s/done.ckpt", tmp, common, tmp);
    sh("cp %s/done.ckpt %s/done.copy", tmp, tmp);
    char a[300], b[300];
    snprintf(a, sizeof a, "%s/done.ckpt", tmp);
    snprintf(b, sizeof b, "%s/done.copy", tmp);
    EXPECT(0, "has finished epoch 2 of 2: nothing to train; raise --epochs to continue",
           HR " train %s/tiny.model %s --epochs 2 --resume %s/done.ckpt --save %s/done.ckpt", tmp, common, tmp, tmp);
    CHECK(!strstr(out, "epoch 3/"), "a finished run trained:\n%s", out);
    CHECK(cmp_files(a, b) == 0, "resuming a finished run rewrote its checkpoint");
    EXPECT(0, "has finished 2 epochs, and --epochs is 1: nothing to train; raise --epochs past 2",
           HR " train %s/tiny.model %s --epochs 1 --resume %s/done.ckpt --save %s/done.ckpt", tmp, common, tmp, tmp);
    CHECK(cmp_files(a, b) == 0, "resuming a finished run rewrote its checkpoint");
    /* raised, it goes on */
    EXPECT(0, "epoch 3/3", HR " train %s/tiny.model %s --epochs 3 --resume %s/done.ckpt", tmp, common, tmp);
}

/* Resume with another batch or precision is refused with the flag that
 * would match, or, with --next-epoch, starts at the next epoch's first batch
 * (the old epoch's position counts batches of the old size); a checkpoint past
 * --max-steps (a count from the run's start) trains nothing. */
static void test_next_epoch(void) {
    write_file("tiny.model", tiny);
    const char *common = "--data synthetic --samples 256 --device cpu --seed 7 --epochs 3";
    EXPECT(0, "stopped after 21 steps (--max-steps) in epoch 2 at batch 5",
           HR " train %s/tiny.model %s --batch 16 --max-steps 21 --save %s/ne.ckpt -q", tmp, common, tmp);
    EXPECT(2, "resume it with --batch 16", HR " train %s/tiny.model %s --batch 32 --resume %s/ne.ckpt -q", tmp, common, tmp);
    CHECK(strstr(out, "--next-epoch to continue with --batch 32"), "the batch refusal names --next-epoch:\n%s", out);
    EXPECT(2, "resume it with --precision fp32",
           HR " train %s/tiny.model %s --batch 16 --precision bf16 --resume %s/ne.ckpt -q", tmp, common, tmp);
    CHECK(strstr(out, "--next-epoch"), "the precision refusal names --next-epoch:\n%s", out);
    /* epoch 2 is left at batch 5; epoch 3 runs in batches of 32: step 25 is its 4th */
    EXPECT(0, "stopped after 25 steps (--max-steps) in epoch 3 at batch 4",
           HR " train %s/tiny.model %s --batch 32 --precision bf16 --next-epoch --max-steps 25 --resume %s/ne.ckpt",
           tmp, common, tmp);
    CHECK(strstr(out, "resumed from") && strstr(out, "epoch 2, batch 0, step 21, bf16 (--next-epoch: epoch 2's last"),
          "the resume line says where it starts:\n%s", out);
    CHECK(!strstr(out, "epoch 2/3"), "--next-epoch trained the rest of epoch 2:\n%s", out);
    EXPECT(0, "has taken 21 steps, and --max-steps is 10: nothing to train",
           HR " train %s/tiny.model %s --batch 16 --max-steps 10 --resume %s/ne.ckpt", tmp, common, tmp);
    EXPECT(2, "--next-epoch is for train --resume", HR " train %s/tiny.model %s --next-epoch", tmp, common);
    EXPECT(2, "--next-epoch is for train --resume", HR " eval %s/tiny.model --weights %s/ne.ckpt --next-epoch", tmp, tmp);
    /* the learning-rate schedule's flags: in range, or refused at once */
    EXPECT(0, "epoch 1/1", HR " train %s/tiny.model %s --batch 16 --epochs 1 --warmup 2 --lr-decay 10 -q", tmp, common);
    EXPECT(2, "--lr-decay 5 must be past the --warmup of 10 steps",
           HR " train %s/tiny.model %s --batch 16 --warmup 10 --lr-decay 5", tmp, common);
    EXPECT(2, "--min-lr 1 is above the learning rate", HR " train %s/tiny.model %s --min-lr 1 --lr-decay 9", tmp, common);
    EXPECT(2, "--min-lr 0.0001 needs --lr-decay", HR " train %s/tiny.model %s --min-lr 0.0001", tmp, common);
    EXPECT(2, "--warmup '-3' is not a number of steps", HR " train %s/tiny.model %s --warmup -3", tmp, common);
}

/* Text: a tiny GPT trained on a text's bytes (text:FILE), its validation
 * loss, eval, and generate (the same seed, the same text); what does not fit
 * together is refused with what to change. */
static const char *tiny_gpt =
    "input 16\n"
    "wte = Embedding(256, 16)\n"
    "wpe = PositionEmbedding(16, 16)\n"
    "h.0.ln_1 = LayerNorm(16)\n"
    "h.0.attn.c_attn = Linear(16, 48)\n"
    "CausalSelfAttention(16, 2)\n"
    "h.0.attn.c_proj = Linear(16, 16)\n"
    "r = Add(wpe)\n"
    "ln_f = LayerNorm(16)\n"
    "lm_head = Linear(16, 256, bias=False, tied_to='wte')\n"
    "loss CrossEntropyLoss\n";

/* PyTorch's weights of a two-block GPT (nanoGPT's names, the tied weight
 * under both) and the validation loss PyTorch computed for them
 * (scripts/make_golden_gpt.py): headroom's eval must print the same. */
static void test_text_golden(void) {
    EXPECT(0, "golden", "python3 -c \"import json,struct; f=open('tests/golden/gpt_tiny.safetensors','rb'); "
                        "n=struct.unpack('<Q',f.read(8))[0]; m=json.loads(f.read(n))['__metadata__']; "
                        "print('golden', m['golden.val_loss'], m['golden.accuracy'])\"");
    double want = 0, want_acc = 0;
    const char *g = strstr(out, "golden ");
    if (g) sscanf(g + 7, "%lf %lf", &want, &want_acc);
    EXPECT(0, "val loss", HR " eval tests/golden/gpt_tiny.model --weights tests/golden/gpt_tiny.safetensors --data "
                          "text:tests/golden/gpt_tiny.txt --device cpu -q");
    double got = 0, got_acc = 0;
    const char *v = strstr(out, "val loss ");
    if (v) sscanf(v + 9, "%lf, next token right %lf", &got, &got_acc);
    CHECK(want > 1 && fabs(got - want) < 2e-4 && fabs(got_acc / 100 - want_acc) < 1e-4,
          "PyTorch's GPT weights: headroom's val loss %.4f, accuracy %.2f%%; PyTorch's %.6f, %.4f", got, got_acc, want,
          want_acc);
}

/* The tied weight under both names in checkpoint tmp/NAME, as PyTorch's
 * state_dict has it: the same shape and bytes. */
static void tied_ok(const char *name) {
    EXPECT(0, "tied ok", "python3 -c \"import json,struct; f=open('%s/%s','rb'); n=struct.unpack('<Q',f.read(8))[0]; "
                         "h=json.loads(f.read(n)); b=f.read(); a,w=h['lm_head.weight'],h['wte.weight']; "
                         "s=lambda t: b[t['data_offsets'][0]:t['data_offsets'][1]]; "
                         "print('tied ok' if a['shape']==w['shape']==[256,16] and s(a)==s(w) else 'differ')\"", tmp,
           name);
}

static void test_text(void) {
    test_text_golden();
    write_file("gpt.model", tiny_gpt);
    char text[3001];
    for (int i = 0; i < 3000; i++) text[i] = "the quick brown fox jumps over the lazy dog. "[i % 45];
    text[3000] = 0;
    write_file("fox.txt", text);
    const char *common = "--batch 8 --device cpu --seed 3";
    /* 3000 bytes: validation 300 (18 windows of 16), training 2700 (168 windows): 21 batches */
    EXPECT(0, "epoch 2/2", HR " train %s/gpt.model --data text:%s/fox.txt %s --epochs 2 --lr 3e-3 --save %s/gpt.ckpt",
           tmp, tmp, common, tmp);
    CHECK(strstr(out, "val loss") && strstr(out, "next token right"), "an epoch reports the validation loss:\n%s", out);
    double v1 = 0, v2 = 0;
    const char *e1 = strstr(out, "epoch 1/2"), *e2 = strstr(out, "epoch 2/2");
    if (e1 && strstr(e1, "val loss ")) v1 = atof(strstr(e1, "val loss ") + 9);
    if (e2 && strstr(e2, "val loss ")) v2 = atof(strstr(e2, "val loss ") + 9);
    CHECK(v1 > 0 && v2 > 0 && v2 < v1, "the validation loss falls (%.4f, %.4f)", v1, v2);
    EXPECT(0, "val loss", HR " eval %s/gpt.model --weights %s/gpt.ckpt --data text:%s/fox.txt --device cpu", tmp, tmp,
           tmp);
    CHECK(strstr(out, "18 windows of 16 tokens"), "eval reads the validation tail:\n%s", out);
    char vl[64];
    snprintf(vl, sizeof vl, "%.40s", strstr(out, "val loss") ? strstr(out, "val loss") : "?");
    /* eval's own batch (18 windows) over a budget: it takes the largest that fits (10), the same loss */
    EXPECT(0, "evaluating 10 samples a batch", HR " eval %s/gpt.model --weights %s/gpt.ckpt --data text:%s/fox.txt "
           "--device cpu --budget 200KiB", tmp, tmp, tmp);
    CHECK(!strncmp(vl, "val loss", 8) && strstr(out, vl) != NULL, "the same validation loss at the smaller batch ('%s'):\n%s", vl, out);
    /* a batch the user named is not changed: refused, with the largest that fits */
    EXPECT(3, "largest batch that fits: 10", HR " eval %s/gpt.model --weights %s/gpt.ckpt --data text:%s/fox.txt "
           "--device cpu --budget 200KiB --batch 18", tmp, tmp, tmp);
    /* the tied weight under both names, as PyTorch's state_dict has it: the same values */
    tied_ok("gpt.ckpt");
    /* under --precision bf16 the Linear reads the weight's half copy: still both names */
    EXPECT(0, "stopped after 1 step", HR " train %s/gpt.model --data text:%s/fox.txt %s --max-steps 1 --precision bf16 "
           "--save %s/gpt16.ckpt", tmp, tmp, common, tmp);
    tied_ok("gpt16.ckpt");
    /* without validation the head and its loss are one node (LinearCrossEntropy): still both names */
    EXPECT(0, "stopped after 1 step", HR " train %s/gpt.model --data text:%s/fox.txt %s --max-steps 1 --eval-batch 0 "
           "--save %s/gptf.ckpt", tmp, tmp, common, tmp);
    tied_ok("gptf.ckpt");
    /* generate: the prompt, then --tokens bytes; the same seed gives the same text */
    EXPECT(0, "the q", HR " generate %s/gpt.model --weights %s/gpt.ckpt --prompt 'the q' --tokens 12 --seed 5 "
                       "--device cpu", tmp, tmp);
    char first[256];
    snprintf(first, sizeof first, "%.200s", out);
    CHECK(strlen(first) == 5 + 12 + 1, "generate prints the prompt and 12 bytes: '%s'", first);
    EXPECT(0, "the q", HR " generate %s/gpt.model --weights %s/gpt.ckpt --prompt 'the q' --tokens 12 --seed 5 "
                       "--device cpu", tmp, tmp);
    CHECK(!strcmp(first, out), "the same seed, the same text: '%s' then '%s'", first, out);
    /* a window of 80 grows with the context (32, 64, 80): the text of the whole window every token */
    char wide[600];
    snprintf(wide, sizeof wide, "%s", tiny_gpt);
    char *in = strstr(wide, "input 16"), *pe = strstr(wide, "PositionEmbedding(16");
    if (in && pe) {
        memcpy(in, "input 80", 8);
        memcpy(pe, "PositionEmbedding(80", 20);
        write_file("gpt80.model", wide);
        EXPECT(0, "stopped after 2 steps", HR " train %s/gpt80.model --data text:%s/fox.txt %s --max-steps 2 --save "
               "%s/gpt80.ckpt", tmp, tmp, common, tmp);
        EXPECT(0, "the q", HR " generate %s/gpt80.model --weights %s/gpt80.ckpt --prompt 'the q' --tokens 90 --seed 2 "
                           "--device cpu", tmp, tmp);
        char grown[256];
        snprintf(grown, sizeof grown, "%.200s", out);
        CHECK(strlen(grown) == 5 + 90 + 1, "generate prints the prompt and 90 bytes: '%s'", grown);
        EXPECT(0, "the q", "HR_GENERATE_GROW=0 " HR " generate %s/gpt80.model --weights %s/gpt80.ckpt --prompt 'the q' "
                           "--tokens 90 --seed 2 --device cpu", tmp, tmp);
        CHECK(!strcmp(grown, out), "the growing window gives the whole window's text: '%s' then '%s'", grown, out);
    }
    EXPECT(2, "--temperature '0' is not", HR " generate %s/gpt.model --weights %s/gpt.ckpt --temperature 0", tmp, tmp);
    EXPECT(2, "which weights?", HR " generate %s/gpt.model", tmp);
    EXPECT(2, "--tokens '-1' is not", HR " generate %s/gpt.model --weights x --tokens -1", tmp);
    EXPECT(2, "unknown option '--bogus'", HR " generate %s/gpt.model --weights x --bogus 1", tmp);
    EXPECT(1, "does not predict the next token", HR " generate examples/mlp.model --weights %s/gpt.ckpt", tmp);
    EXPECT(1, "nosuch.ckpt", HR " generate %s/gpt.model --weights %s/nosuch.ckpt --prompt xyzzy --device cpu", tmp,
           tmp);
    CHECK(!strstr(out, "xyzzy"), "a checkpoint that does not load: nothing printed before the error: '%s'", out);
    /* a vocabulary smaller than the bytes, an image model on text, a missing text */
    write_file("small.model", "input 16\nEmbedding(100, 8)\nLinear(8, 100)\nloss CrossEntropyLoss\n");
    EXPECT(1, "has token ids up to", HR " train %s/small.model --data text:%s/fox.txt %s --epochs 1", tmp, tmp, common);
    EXPECT(1, "write it as `input T`", HR " train examples/simple_cnn.model --data text:%s/fox.txt %s --epochs 1", tmp,
           common);
    EXPECT(1, "nosuch.txt", HR " train %s/gpt.model --data text:%s/nosuch.txt %s --epochs 1", tmp, tmp, common);
    /* the plan's attention line: (8, 16, 16) F32 out 8 KiB, lse (8, 2, 16) 1 KiB, probabilities 8 x 2 x 16 x 16 */
    EXPECT(0, "output 8.00 KiB + log-sum-exp 1.00 KiB; the probabilities would be 16.00 KiB",
           HR " plan %s/gpt.model --batch 8 --device cpu", tmp);
    CHECK(strstr(out, "attention: 1 layer, none keeps its time x time probabilities (the backward"), "%s", out);
    EXPECT(0, "\"attention\": [{\"layer\": \"4\", \"output\": 8192, \"lse\": 1024, \"probabilities_not_kept\": 16384}]",
           HR " plan %s/gpt.model --batch 8 --device cpu --json", tmp);
    /* --max-steps without --epochs trains past the default 10 epochs (21 batches each) */
    EXPECT(0, "stopped after 250 steps (--max-steps) in epoch 12 at batch 19", HR " train %s/gpt.model --data "
           "text:%s/fox.txt %s --max-steps 250 --lr 0", tmp, tmp, common);
    EXPECT(0, "epoch 2/2", HR " train %s/gpt.model --data text:%s/fox.txt %s --max-steps 250 --epochs 2 --lr 0", tmp,
           tmp, common);
    /* fp16 from a scale of 1e10: the first batches overflow and are skipped (no step), so more epochs are needed */
    EXPECT(0, "stopped after 30 steps (--max-steps)", HR " train %s/gpt.model --data text:%s/fox.txt %s --max-steps 30 "
           "--precision fp16 --loss-scale 1e10", tmp, tmp, common);
    CHECK(strstr(out, "skipped"), "the run skipped steps (else this case tests nothing):\n%s", out);
    /* --decay-matrices-only: one AdamW step with a large decay, with and
     * without it: the matrices (and the embeddings) the same bits, a 1-D
     * tensor that decay moves (LayerNorm's weight of ones) different */
    for (int k = 0; k < 2; k++)
        EXPECT(0, "stopped after 1 step", HR " train %s/gpt.model --data text:%s/fox.txt %s --epochs 1 --max-steps 1 --optim adamw "
               "--lr 0.1 --weight-decay 0.5 %s --save %s/wd%d.ckpt", tmp, tmp, common,
               k ? "--decay-matrices-only" : "", tmp, k);
    EXPECT(0, "groups ok", "python3 -c \"import json,struct\n"
                           "def rd(p):\n f=open(p,'rb'); n=struct.unpack('<Q',f.read(8))[0]; h=json.loads(f.read(n)); b=f.read()\n"
                           " return {k:(v['shape'],b[v['data_offsets'][0]:v['data_offsets'][1]]) for k,v in h.items() if k!='__metadata__'}\n"
                           "a,b=rd('%s/wd0.ckpt'),rd('%s/wd1.ckpt')\n"
                           "m=all(a[k]==b[k] for k in a if len(a[k][0])>=2); o=a['h.0.ln_1.weight']!=b['h.0.ln_1.weight']\n"
                           "print('groups ok' if m and o else 'groups wrong %%s %%s' %% (m,o))\"", tmp, tmp);
    /* resuming on another kind of data is refused */
    EXPECT(2, "same kind of --data (a text)", HR " train %s/gpt.model --data synthetic %s --epochs 3 --resume %s/gpt.ckpt",
           tmp, common, tmp);
}

static double seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Host memory is planned before any data is read or made: an absurd batch on
 * any data source is refused at once (exit 3, the table, the largest batch),
 * and HR_HOST_MEMORY caps what the plan may take, as a small host would. */
static void test_host_memory(void) {
    write_file("tiny.model", tiny);
    const char *absurd[] = {
        "--data synthetic --batch 100000000 --samples 100000000",
        "--data synthetic --batch 1000000000000 --samples 1000000000000",
        "--data synthetic --batch 1e12 --samples 1e12 --eval-batch 1",
        "--data synthetic --batch 100000000 --samples 100000000 --device cuda",
    };
    for (size_t i = 0; i < sizeof absurd / sizeof *absurd; i++) {
        double t0 = seconds();
        EXPECT(3, "does not fit host memory", "timeout 20 " HR " train %s/tiny.model %s --device cpu", tmp, absurd[i]);
        double t = seconds() - t0;
        CHECK(t < 1.0, "refused in %.2f s, not under 1 s: %s", t, absurd[i]);
        CHECK(strstr(out, "loader slots") && strstr(out, "largest batch that fits"), "the table and the largest batch:\n%s",
              out);
    }
    EXPECT(3, "does not fit host memory",
           "timeout 20 " HR " eval %s/tiny.model --weights %s/nosuch.ckpt --data synthetic --samples 1e12 --batch 1e12 --device cpu", tmp,
           tmp);
    /* IDX data: its floats count, known from the headers (60000 + 10000 images of 28x28: 210 MiB) */
    struct stat sb;
    if (stat("/usr/share/datasets/fashion-mnist", &sb) == 0) {
        EXPECT(3, "data sets            210.62 MiB",
               "HR_HOST_MEMORY=400MiB timeout 20 " HR " train examples/fashion.model --data fashion-mnist --batch 60000 --device cpu");
        CHECK(strstr(out, "host arena"), "the planned table has the CPU arena:\n%s", out);
    }
    /* a cap that the lower bound fits (loader 9.9 MiB, evaluation 5.3 MiB) but the arena (51 MiB) does not:
     * the largest batch it names runs, one more is refused */
    const char *capped = "HR_HOST_MEMORY=276MiB timeout 20 " HR " train %s/tiny.model --data synthetic --samples 100000 --device cpu";
    char cmd[512];
    snprintf(cmd, sizeof cmd, "%s --batch 20000", capped);
    EXPECT(3, "host arena ", cmd, tmp);
    const char *at = strstr(out, "largest batch that fits: ");
    long long fit = at ? atoll(at + 25) : 0;
    CHECK(fit > 1 && fit < 20000 && !strstr(out, "not planned"), "largest batch %lld after the plan:\n%s", fit, out);
    if (fit > 1) {
        snprintf(cmd, sizeof cmd, "%s --batch %lld --max-steps 1 -q", capped, fit);
        EXPECT(0, "stopped after 1 step (--max-steps)", cmd, tmp);
        snprintf(cmd, sizeof cmd, "%s --batch %lld --max-steps 1 -q", capped, fit + 1);
        EXPECT(3, "does not fit host memory", cmd, tmp);
    }
}
/* One IDX file of n items of shape dims (big-endian header: magic, dims),
 * payload byte i = (i * 37 + salt) % mod. */
static void write_idx(const char *name, uint32_t magic, const uint32_t *dims, int ndim, int mod, int salt) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", tmp, name);
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL, "cannot write %s", path);
    if (!f) return;
    uint32_t total = 1, w[4] = {magic};
    for (int i = 0; i < ndim; i++) w[1 + i] = dims[i], total *= dims[i];
    for (int i = 0; i <= ndim; i++) {
        unsigned char be[4] = {(unsigned char)(w[i] >> 24), (unsigned char)(w[i] >> 16), (unsigned char)(w[i] >> 8),
                               (unsigned char)w[i]};
        fwrite(be, 1, 4, f);
    }
    for (uint32_t i = 0; i < total; i++) fputc((int)((i * 37 + (uint32_t)salt) % (uint32_t)mod), f);
    fclose(f);
}

/* headroom.input* of a checkpoint written by train, read back with the
 * safetensors reader: mean and std as "%.9g" of the floats that the IDX
 * loader divides by; none for synthetic data, which is not normalised. */
static void check_input_meta(const char *ckpt, bool normalised, const char *desc) {
    hr_safetensors_t *f = hr_safetensors_open(ckpt);
    CHECK(f != NULL, "open %s: %s", ckpt, hr_last_error());
    if (!f) return;
    const char *in = hr_safetensors_meta(f, "headroom.input"), *mean = hr_safetensors_meta(f, "headroom.input_mean"),
               *std = hr_safetensors_meta(f, "headroom.input_std");
    CHECK(in && strstr(in, desc), "%s: headroom.input = '%s', want it to say '%s'", ckpt, in ? in : "(absent)", desc);
    if (normalised) {
        /* 0.2860f and 0.3530f, to 9 significant digits: Fashion-MNIST's statistics */
        CHECK(mean && !strcmp(mean, "0.286000013") && strtof(mean, NULL) == 0.2860f,
              "%s: headroom.input_mean = '%s', want '0.286000013'", ckpt, mean ? mean : "(absent)");
        CHECK(std && !strcmp(std, "0.352999985") && strtof(std, NULL) == 0.3530f,
              "%s: headroom.input_std = '%s', want '0.352999985'", ckpt, std ? std : "(absent)");
    } else {
        CHECK(!mean && !std, "%s: synthetic data is not normalised, yet headroom.input_mean = '%s', input_std = '%s'",
              ckpt, mean ? mean : "(absent)", std ? std : "(absent)");
    }
    hr_safetensors_free(f);
    /* and what the checkpoint reader makes of them */
    hr_ckpt_meta m;
    memset(&m, 0, sizeof m);
    CHECK(hr_checkpoint_peek(ckpt, &m) == HR_OK, "peek %s: %s", ckpt, hr_last_error());
    CHECK(strstr(m.input, desc) != NULL, "%s: peek's input '%s' lacks '%s'", ckpt, m.input, desc);
    CHECK(normalised ? m.input_mean == 0.2860f && m.input_std == 0.3530f : m.input_mean == 0 && m.input_std == 0,
          "%s: peek's input mean %.9g, std %.9g", ckpt, (double)m.input_mean, (double)m.input_std);
}

/* A checkpoint says how its inputs were made, for a PyTorch evaluation from
 * the file alone: synthetic data, and a small IDX folder made here. */
static void test_input_meta(void) {
    write_file("in.model", "input 1 4 4\nFlatten()\nLinear(16, 10)\nloss CrossEntropyLoss\n");
    EXPECT(0, "epoch 1/1", HR " train %s/in.model --data synthetic --samples 64 --batch 16 --epochs 1 --device cpu "
                           "--save %s/syn.ckpt", tmp, tmp);
    char ckpt[320];
    snprintf(ckpt, sizeof ckpt, "%s/syn.ckpt", tmp);
    check_input_meta(ckpt, false, "synthetic: N(0, 1) from headroom's generator, not normalised");

    char dir[300];
    snprintf(dir, sizeof dir, "%s/idx", tmp);
    mkdir(dir, 0755);
    write_idx("idx/train-images-idx3-ubyte", 0x803, (uint32_t[]){64, 4, 4}, 3, 256, 1);
    write_idx("idx/train-labels-idx1-ubyte", 0x801, (uint32_t[]){64}, 1, 10, 3);
    write_idx("idx/t10k-images-idx3-ubyte", 0x803, (uint32_t[]){16, 4, 4}, 3, 256, 5);
    write_idx("idx/t10k-labels-idx1-ubyte", 0x801, (uint32_t[]){16}, 1, 10, 7);
    EXPECT(0, "epoch 1/1", HR " train %s/in.model --data %s --batch 16 --epochs 1 --device cpu --save %s/idx.ckpt",
           tmp, dir, tmp);
    snprintf(ckpt, sizeof ckpt, "%s/idx.ckpt", tmp);
    check_input_meta(ckpt, true, "IDX files: x/255, then (x - 0.2860) / 0.3530");
    /* eval reads it; a damaged pair is refused by name (edits of the header that keep its length) */
    EXPECT(0, "test accuracy", HR " eval %s/in.model --weights %s --data %s --device cpu", tmp, ckpt, dir);
    sh("LC_ALL=C sed 's/\"headroom.input_std\"/\"headroom.input_xyz\"/' %s > %s/nostd.ckpt", ckpt, tmp);
    EXPECT(1, "has metadata 'headroom.input_mean' but not 'headroom.input_std'; it is damaged",
           HR " eval %s/in.model --weights %s/nostd.ckpt --data %s --device cpu", tmp, tmp, dir);
    sh("LC_ALL=C sed 's/\"0.352999985\"/\"-0.35299998\"/' %s > %s/negstd.ckpt", ckpt, tmp);
    EXPECT(1, "are not finite floats with std > 0",
           HR " eval %s/in.model --weights %s/negstd.ckpt --data %s --device cpu", tmp, tmp, dir);
    /* resume on inputs normalised otherwise: refused, or from the next epoch */
    EXPECT(2, "resume it with the same kind of --data (synthetic)",
           HR " train %s/in.model --data %s --batch 16 --epochs 2 --device cpu --resume %s/syn.ckpt", tmp, dir, tmp);
    CHECK(strstr(out, "was trained on inputs 'synthetic") && strstr(out, "--next-epoch"), "the refusal:\n%s", out);
    EXPECT(0, "epoch 2/2", HR " train %s/in.model --data %s --batch 16 --epochs 2 --device cpu --resume %s/syn.ckpt "
                           "--next-epoch", tmp, dir, tmp);
    EXPECT(2, "(fashion-mnist or an IDX folder)",
           HR " train %s/in.model --data synthetic --samples 64 --batch 16 --epochs 2 --device cpu --resume %s", tmp,
           ckpt);
}

/* The accuracy printed after an epoch with accumulation is the checkpoint's
 * as eval computes it (the evaluation pass follows the micro-batch: each
 * chunk of the test set must be its batch, or outputs never written are read). */
static void test_accumulate_eval(void) {
    write_file("acc.model", "input 1 8 8\nConv2d(1, 4, 3, padding=1)\nReLU()\nFlatten()\nLinear(256, 10)\n"
                            "loss CrossEntropyLoss\n");
    char train[64] = "", eval[64] = "";
    int rc = sh(HR " train %s/acc.model --data synthetic --samples 512 --batch 64 --accumulate 4 --epochs 1 "
                "--save %s/acc.ckpt -q --device cpu", tmp, tmp);
    const char *a = strstr(out, "test accuracy ");
    CHECK(rc == 0 && a, "train with accumulation: %s", out);
    if (a) sscanf(a, "test accuracy %63s", train);
    rc = sh(HR " eval %s/acc.model --weights %s/acc.ckpt --data synthetic --samples 512 --device cpu", tmp, tmp);
    a = strstr(out, "test accuracy ");
    CHECK(rc == 0 && a, "eval: %s", out);
    if (a) sscanf(a, "test accuracy %63s", eval);
    CHECK(*train && !strcmp(train, eval), "accuracy after an epoch with --accumulate 4 (%s) is eval's (%s)", train, eval);
}

/* recompute, fit and train --fit on the CPU (estimates: --no-measure) */
static void test_fit(void) {
    EXPECT(0, "recomputed layers", HR " plan examples/resnet_tiny.model --batch 256 --recompute min --device cpu");
    EXPECT(1, "no layer named 'nosuch'", HR " plan examples/resnet_tiny.model --recompute 0,nosuch --device cpu");
    EXPECT(2, "--recompute", HR " plan examples/resnet_tiny.model --recompute ''");
    EXPECT(0, "choice: headroom train examples/resnet_tiny.model --batch 256",
           "HR_CACHE_DIR=%s/cache " HR " fit examples/resnet_tiny.model --batch 256 --budget 100MiB --no-measure "
           "--device cpu", tmp);
    CHECK(strstr(out, "<- chosen") && strstr(out, "does not fit"), "fit lists what fits and what does not: %s", out);
    EXPECT(0, "\"choice\": 0", "HR_CACHE_DIR=%s/cache " HR " fit examples/mlp.model --batch 512 --budget 1GiB "
           "--no-measure --device cpu --precision fp32,bf16 --json", tmp);
    EXPECT(3, "the smallest configuration (micro-batch 1 x 256",
           "HR_CACHE_DIR=%s/cache " HR " fit examples/resnet_tiny.model --batch 256 --budget 512KiB --no-measure "
           "--device cpu", tmp);
    EXPECT(2, "give --budget", HR " fit examples/mlp.model --batch 64 --device cpu --no-measure");
    EXPECT(2, "which effective batch", HR " fit examples/mlp.model --budget 1GiB");
    EXPECT(2, "is not fp32, bf16, fp16 or a list", HR " fit examples/mlp.model --batch 8 --precision fp8");
    EXPECT(2, "a list is for fit", HR " plan examples/mlp.model --precision fp32,bf16");
    EXPECT(2, "--fit is for fit and train --fit", HR " plan examples/mlp.model --fit");
    EXPECT(2, "leave out --accumulate", HR " train examples/mlp.model --fit --accumulate 2");
    write_file("fit.model", "input 1 8 8\nConv2d(1, 8, 3, padding=1)\nReLU()\nFlatten()\nLinear(512, 10)\n"
                            "loss CrossEntropyLoss\n");
    EXPECT(0, "fit: batch 256 as 2 x 128",
           "HR_CACHE_DIR=%s/cache " HR " train %s/fit.model --data synthetic --samples 1024 --batch 256 --epochs 1 "
           "--fit --budget 600KiB --no-measure --device cpu", tmp, tmp);
}

/* --context T: a token model planned, fitted and trained at another length;
 * images, features and lengths past the position table are refused. */
static long long largest_in(const char *o) {
    const char *a = strstr(o, "largest batch that fits: ");
    return a ? atoll(a + strlen("largest batch that fits: ")) : -1;
}

static void test_context(void) {
    EXPECT(0, "largest batch that fits", HR " plan examples/char_gpt.model --batch 8 --budget 1GiB --device cpu");
    long long full = largest_in(out);
    EXPECT(0, "largest batch that fits",
           HR " plan examples/char_gpt.model --batch 8 --context 64 --budget 1GiB --device cpu");
    long long short_ = largest_in(out);
    CHECK(full > 0 && short_ > 2 * full, "a quarter of the context fits more than twice the batch: %lld at 64, %lld at "
          "256", short_, full);
    EXPECT(0, "--context 64 --accumulate",
           "HR_CACHE_DIR=%s/cache " HR " fit examples/char_gpt.model --batch 64 --context 64 --budget 300MiB "
           "--no-measure --device cpu", tmp);
    EXPECT(0, "stopped after 2 steps", HR " train examples/char_gpt.model --data text:README.md --context 16 --batch 4 "
           "--max-steps 2 --device cpu");
    EXPECT(1, "longer than layer transformer.wpe's table of 256", HR " plan examples/char_gpt.model --context 257");
    EXPECT(1, "a model of token ids", HR " plan examples/mlp.model --context 64");
    EXPECT(1, "in [1, 2^31]", HR " plan examples/char_gpt.model --context 1e12");
    EXPECT(2, "not a positive number of positions", HR " plan examples/char_gpt.model --context 0");
}

/* A plan for a GPU made without one counts the GPU's head workspace (its
 * piece of logits): GPT-2 at batch 16 in bf16 for an H100 against what
 * NVML measured there for the process (session 19, 2026-11-27: 8,288 MiB,
 * headroom's own plan 8,291), within 1%. It was 7.53 GiB (-7%) when the
 * estimate counted the CPU's workspaces only. */
static void test_gpu_estimate(void) {
    EXPECT(0, "estimate for an NVIDIA H100", HR " plan examples/gpt2.model --batch 16 --device cuda --gpu h100 "
           "--precision bf16 --optim adamw");
    const char *t = strstr(out, "device total");
    double gib = 0;
    CHECK(t && sscanf(t, "device total %lf GiB", &gib) == 1 && fabs(gib * 1024 - 8288) <= 0.01 * 8288,
          "GPT-2's device total estimated for an H100: %.3f GiB (%.0f MiB); NVML measured 8,288 MiB\n%s", gib,
          gib * 1024, out);
}

int main(void) {
    snprintf(tmp, sizeof tmp, "/tmp/hr_test_cli.%d", (int)getpid());
    mkdir(tmp, 0755);
#ifdef HR_OF_THIS_BUILD
    char bin[4096];
    ssize_t n = readlink("/proc/self/exe", bin, sizeof bin - 16);
    char *dir = n > 0 ? (bin[n] = 0, strrchr(bin, '/')) : NULL; /* BUILD/tests/test_cli */
    if (dir) *dir = 0, dir = strrchr(bin, '/');                 /* BUILD/tests */
    if (dir) strcpy(dir + 1, "headroom");
    setenv("HR_BIN", dir ? bin : "./build/headroom", 0);
    const char *hr = getenv("HR_BIN");
#else
    const char *hr = HR;
#endif
    if (access(hr, X_OK) != 0) {
        fprintf(stderr, "test_cli: %s not built\n", hr);
        CHECK(0, "%s missing: build it (make)", hr);
        TEST_END();
    }
    printf("test_cli: testing %s\n", hr);
    test_model_files();
    test_batches();
    test_data_files();
    test_checkpoints();
    test_input_meta();
    test_nan();
    test_resume_finished();
    test_next_epoch();
    test_text();
    test_host_memory();
    test_accumulate_eval();
    test_fit();
    test_context();
    test_gpu_estimate();
    sh("rm -rf %s", tmp);
    TEST_END();
}
