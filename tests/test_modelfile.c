/* test_modelfile.c — model files: every example parses to the right output
 * shape and parameter names, the broken DeepCNN fails as it should, and each
 * kind of bad input gives its status and a message with file:line. */
#include "check.h"
#include "io/io.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The status behind hr_last_error() (core keeps it; only hr_error_prefix
 * returns it, so the message is put back afterwards). */
static hr_status last_status(void) {
    char msg[2048];
    snprintf(msg, sizeof msg, "%s", hr_last_error());
    hr_status st = hr_error_prefix("-");
    hr_error_set(st, "%s", msg);
    return st;
}

static void check_output(const char *path, int ndim, const int64_t *dims) {
    hr_model_t *m = hr_modelfile_load(path);
    CHECK(m != NULL, "%s: %s", path, hr_last_error());
    if (!m) return;
    int o = hr_model_output(m);
    CHECK(hr_tensor_ndim(m, o) == ndim, "%s: output has %d dims, expected %d", path, hr_tensor_ndim(m, o), ndim);
    for (int i = 0; i < ndim; i++)
        CHECK(hr_tensor_dim(m, o, i) == dims[i], "%s: output dim %d is %lld, expected %lld", path, i,
              (long long)hr_tensor_dim(m, o, i), (long long)dims[i]);
    hr_model_free(m);
}

/* Compiles a model and checks that a parameter has the given shape. */
static void check_param(const char *path, const char *text, const char *param, int ndim, const int64_t *dims) {
    hr_model_t *m = text ? hr_modelfile_parse(text, path) : hr_modelfile_load(path);
    CHECK(m != NULL, "%s: %s", path, hr_last_error());
    if (!m) return;
    hr_config_t cfg = hr_config_default();
    cfg.batch = 2;
    hr_session_t *s = hr_compile(m, &cfg);
    CHECK(s != NULL, "%s compiles: %s", path, hr_last_error());
    int i = s ? hr_state_find(s, param) : -1;
    CHECK(i >= 0, "%s has parameter %s", path, param);
    if (i >= 0) {
        bool ok = hr_state_ndim(s, i) == ndim;
        for (int d = 0; ok && d < ndim; d++) ok = hr_state_dim(s, i, d) == dims[d];
        CHECK(ok, "%s: %s has the wrong shape", path, param);
    }
    hr_session_free(s);
    hr_model_free(m);
}

static void test_examples(void) {
    const int64_t ten[1] = {10};
    check_output("examples/mlp.model", 1, ten);
    check_output("examples/simple_cnn.model", 1, ten);
    check_output("examples/deep_cnn.model", 1, ten);
    check_output("examples/fashion.model", 1, ten);
    check_output("examples/resnet_tiny.model", 1, ten);
    /* Names as nn.Sequential gives them: every layer line counts. */
    check_param("examples/fashion.model", NULL, "0.weight", 4, (int64_t[]){32, 1, 3, 3});
    check_param("examples/fashion.model", NULL, "5.running_var", 1, (int64_t[]){64});
    check_param("examples/fashion.model", NULL, "10.weight", 2, (int64_t[]){256, 3136});
    check_param("examples/fashion.model", NULL, "13.bias", 1, (int64_t[]){10});
    check_param("examples/mlp.model", NULL, "4.weight", 2, (int64_t[]){10, 1000});
    check_param("examples/deep_cnn.model", NULL, "10.weight", 2, (int64_t[]){10, 8192});
    check_param("examples/resnet_tiny.model", NULL, "right.weight", 4, (int64_t[]){16, 16, 3, 3});
    check_param("examples/resnet_tiny.model", NULL, "left.weight", 4, (int64_t[]){16, 16, 1, 1});
    check_param("examples/resnet_tiny.model", NULL, "17.weight", 2, (int64_t[]){10, 32});

    hr_model_t *m = hr_modelfile_load("examples/deep_cnn_broken.model");
    const char *msg = hr_last_error();
    CHECK(m == NULL, "the broken DeepCNN must not build");
    CHECK(last_status() == HR_ERR_SHAPE, "broken DeepCNN: status %s", hr_status_name(last_status()));
    CHECK(strstr(msg, "examples/deep_cnn_broken.model:20:") && strstr(msg, "2048") && strstr(msg, "8192") &&
              strstr(msg, "Linear") && strstr(msg, "layer 10"),
          "broken DeepCNN message names the layer and both sizes: %s", msg);
    hr_model_free(m);
}

/* Syntax a PyTorch user may write, all accepted. */
static void test_syntax(void) {
    static const struct { const char *text; int ndim; int64_t d0; } ok[] = {
        {"input 4\r\nLinear(4, 3)\r\nloss MSELoss\r\n", 1, 3},
        {"  # comment\n\ninput 4   # features\nnn.Linear(4, 3, bias=False),\nnn.ReLU(inplace=True),\n"
         "loss CrossEntropyLoss()", 1, 3},
        {"input 1 8 8\nConv2d(1, 4, kernel_size=(3, 3), stride=1, padding='same', bias=true)\nReLU\n"
         "MaxPool2d(2, stride=None)\nAvgPool2d(kernel_size=2, stride=2)\nFlatten()\nLinear(16, 5)\n"
         "LogSoftmax(dim=1)\nloss MSELoss", 1, 5},
        {"input 12\nBatchNorm1d(12, eps=1e-3, momentum=0.01)\nDropout(p=0.1)\nReshape(3, -1, 2)\nFlatten()\n"
         "Softmax(dim=-1)\nloss MSELoss(reduction='mean')", 1, 12},
        {"input 2 4 4\na = Conv2d(2, 2, 1)\nb = Conv2d(2, 3, 1)(input)\nc = Concat(a, b, input)\n"
         "Conv2d(7, 2, 1)\nAdd(a)\nAdd(0, 4)\nAdaptiveAvgPool2d((1, 1))\nFlatten()\nloss CrossEntropyLoss", 1, 2},
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        hr_model_t *m = hr_modelfile_parse(ok[i].text, "ok.model");
        CHECK(m != NULL, "good model %zu: %s", i, hr_last_error());
        if (!m) continue;
        int o = hr_model_output(m);
        CHECK(hr_tensor_ndim(m, o) == ok[i].ndim && hr_tensor_dim(m, o, 0) == ok[i].d0, "good model %zu output", i);
        hr_model_free(m);
    }
}

typedef struct {
    const char *text;
    hr_status st;
    int line;
    const char *needle;
} bad_case;

#define HEAD "input 4\n"
#define IMG "input 1 8 8\n"
static const bad_case bad[] = {
    {HEAD "Conv3d(1, 2, 3)\nloss MSELoss", HR_ERR_PARSE, 2, "unknown layer 'Conv3d'; known layers: Linear, Conv2d"},
    {HEAD "relu()\nloss MSELoss", HR_ERR_PARSE, 2, "unknown layer 'relu' (did you mean ReLU?)"},
    {HEAD "Linear(4, 2, foo=1)\nloss MSELoss", HR_ERR_PARSE, 2,
     "Linear has no argument 'foo'; its arguments are: in_features, out_features, bias"},
    {HEAD "ReLU(x=1)\nloss MSELoss", HR_ERR_PARSE, 2, "ReLU has no argument 'x'"},
    {HEAD "Linear(4)\nloss MSELoss", HR_ERR_PARSE, 2, "Linear is missing its argument 'out_features'"},
    {HEAD "Linear\nloss MSELoss", HR_ERR_PARSE, 2, "Linear is missing its argument 'in_features'"},
    {HEAD "Linear(4, 2, True, 5)\nloss MSELoss", HR_ERR_PARSE, 2, "at most 3 positional arguments but 4 were given"},
    {HEAD "Flatten(0)\nloss MSELoss", HR_ERR_UNSUPPORTED, 2, "Flatten with start_dim=0 is not supported"},
    {HEAD "Linear(4, 2.5)\nloss MSELoss", HR_ERR_PARSE, 2, "out_features must be a positive integer, got 2.5"},
    {HEAD "Linear(4, x)\nloss MSELoss", HR_ERR_PARSE, 2, "out_features must be a positive integer, got x"},
    {HEAD "Linear(4, 0)\nloss MSELoss", HR_ERR_PARSE, 2, "out_features must be a positive integer, got 0"},
    {IMG "Conv2d(1, 2, -3)\nloss MSELoss", HR_ERR_PARSE, 2, "kernel_size must be a positive integer, got -3"},
    {HEAD "Linear(4, 2x)\nloss MSELoss", HR_ERR_PARSE, 2, "'2x' is not a number"},
    {HEAD "Linear(4, 99999999999999999999)\nloss MSELoss", HR_ERR_PARSE, 2, "too large"},
    {HEAD "Linear(4, 2, bias=1)\nloss MSELoss", HR_ERR_PARSE, 2, "bias must be True or False, got 1"},
    {HEAD "Linear(4, 2, bias=True, bias=False)\nloss MSELoss", HR_ERR_PARSE, 2, "'bias' given twice"},
    {HEAD "Linear(4, 2, in_features=4)\nloss MSELoss", HR_ERR_PARSE, 2, "two values for argument 'in_features'"},
    {HEAD "Linear(in_features=4, 2)\nloss MSELoss", HR_ERR_PARSE, 2, "positional argument follows a keyword"},
    {HEAD "Linear(4, 2\nloss MSELoss", HR_ERR_PARSE, 2, "expected ',' or ')'"},
    {HEAD "Linear(4, 2) extra\nloss MSELoss", HR_ERR_PARSE, 2, "unexpected 'extra' after the layer"},
    {HEAD "Linear(4, 2);\nloss MSELoss", HR_ERR_PARSE, 2, "unexpected ';' after the layer"},
    {HEAD "\n# c\nLinear(4, 2),,\nloss MSELoss", HR_ERR_PARSE, 4, "unexpected ','"},
    {"# no input\nLinear(4, 2)\nloss MSELoss", HR_ERR_PARSE, 2, "Linear comes before the input line"},
    {"# only a comment\n\n", HR_ERR_PARSE, 2, "no input line"},
    {"", HR_ERR_PARSE, 1, "no input line"},
    {HEAD "Linear(4, 2)\n\n", HR_ERR_PARSE, 3, "no loss line; end it with `loss CrossEntropyLoss`"},
    {HEAD "Linear(4, 2)\nloss MSELoss\nReLU()", HR_ERR_PARSE, 4, "nothing may follow the loss line (line 3)"},
    {HEAD "loss MSELoss\nloss MSELoss", HR_ERR_PARSE, 3, "nothing may follow the loss line"},
    {HEAD "loss NLLLoss", HR_ERR_PARSE, 2, "unknown loss 'NLLLoss'; known losses: CrossEntropyLoss, MSELoss"},
    {HEAD "loss CrossEntropyLoss(label_smoothing=0.1)", HR_ERR_UNSUPPORTED, 2, "label_smoothing=0.1 is not supported"},
    {HEAD "input 4\nloss MSELoss", HR_ERR_PARSE, 2, "a second input line"},
    {"input 0\nloss MSELoss", HR_ERR_PARSE, 1, "input sizes must be positive integers, got 0"},
    {"input 1 2\nloss MSELoss", HR_ERR_PARSE, 1, "input takes 1 size (features) or 3"},
    {"input 4.5\nloss MSELoss", HR_ERR_PARSE, 1, "positive integers, got 4.5"},
    {"input\nloss MSELoss", HR_ERR_PARSE, 1, "got 0"},
    {HEAD "Add(skp)\nloss MSELoss", HR_ERR_PARSE, 2,
     "Add refers to 'skp', which is not a layer defined above (names so far: input)"},
    {HEAD "a = ReLU()\nAdd(b)\nloss MSELoss", HR_ERR_PARSE, 3, "names so far: input, a, 0"},
    {HEAD "ReLU()(later)\nlater = ReLU()\nloss MSELoss", HR_ERR_PARSE, 2, "ReLU refers to 'later'"},
    {HEAD "Add(input, input, input)\nloss MSELoss", HR_ERR_PARSE, 2, "Add takes one layer name"},
    {HEAD "Add(input)(input)\nloss MSELoss", HR_ERR_PARSE, 2, "Add takes the layers it joins as its arguments"},
    {HEAD "Concat(input)\nloss MSELoss", HR_ERR_PARSE, 2, "Concat takes two or more layer names, got 1"},
    {HEAD "a = ReLU()\na = ReLU()\nloss MSELoss", HR_ERR_PARSE, 3, "layer name 'a' is already used at line 2"},
    {HEAD "input = ReLU()\nloss MSELoss", HR_ERR_PARSE, 2, "'input' cannot name a layer"},
    {HEAD "Linear(5, 2)\nloss MSELoss", HR_ERR_SHAPE, 2, "in_features is 5"},
    {IMG "Linear(64, 2)\nloss MSELoss", HR_ERR_SHAPE, 2, "add Flatten()"},
    {IMG "Conv2d(3, 2, 3)\nloss MSELoss", HR_ERR_SHAPE, 2, "in_channels is 3"},
    {IMG "Conv2d(1, 2, 3, dilation=2)\nloss MSELoss", HR_ERR_UNSUPPORTED, 2, "dilation=2 is not supported by headroom"},
    {IMG "Conv2d(1, 2, (3, 5))\nloss MSELoss", HR_ERR_UNSUPPORTED, 2, "only square kernels"},
    {IMG "Conv2d(1, 2, 4, padding='same')\nloss MSELoss", HR_ERR_UNSUPPORTED, 2, "odd kernel_size"},
    {IMG "Conv2d(1, 2, 3, padding='full')\nloss MSELoss", HR_ERR_PARSE, 2, "'same' or 'valid'"},
    {IMG "MaxPool2d(2, padding=1)\nloss MSELoss", HR_ERR_UNSUPPORTED, 2, "padding=1 is not supported"},
    {IMG "AdaptiveAvgPool2d(2)\nloss MSELoss", HR_ERR_UNSUPPORTED, 2, "only output size 1"},
    {HEAD "Softmax(dim=0)\nloss MSELoss", HR_ERR_UNSUPPORTED, 2, "only dim=1"},
    {HEAD "BatchNorm2d(4)\nloss MSELoss", HR_ERR_SHAPE, 2, "use BatchNorm1d"},
    {HEAD "BatchNorm1d(4, affine=False)\nloss MSELoss", HR_ERR_UNSUPPORTED, 2, "affine=False is not supported"},
    {HEAD "Dropout(1.5)\nloss MSELoss", HR_ERR_PARSE, 2, "Dropout p must be in [0, 1)"},
    {HEAD "Reshape(3, 3)\nloss MSELoss", HR_ERR_SHAPE, 2, "cannot reshape"},
    {HEAD "Reshape(-1, -1)\nloss MSELoss", HR_ERR_PARSE, 2, "one may be -1"},
    {HEAD "Reshape(3, -1)\nloss MSELoss", HR_ERR_SHAPE, 2, "do not divide"},
    {IMG "loss CrossEntropyLoss", HR_ERR_SHAPE, 2, "CrossEntropyLoss takes (batch, classes)"},
    {HEAD "Linear(4, 2, bias='yes)\nloss MSELoss", HR_ERR_PARSE, 2, "unterminated string"},
    {HEAD "\xc3\xa9\nloss MSELoss", HR_ERR_PARSE, 2, "expected a layer"},
    {HEAD "= ReLU()\nloss MSELoss", HR_ERR_PARSE, 2, "expected a layer"},
};

static void test_bad(void) {
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        hr_error_clear();
        hr_model_t *m = hr_modelfile_parse(bad[i].text, "bad.model");
        char where[32];
        snprintf(where, sizeof where, "bad.model:%d:", bad[i].line);
        const char *msg = hr_last_error();
        CHECK(m == NULL, "bad case %zu was accepted", i);
        CHECK(last_status() == bad[i].st, "bad case %zu: status %s, expected %s (%s)", i, hr_status_name(last_status()),
              hr_status_name(bad[i].st), msg);
        CHECK(strstr(msg, where) != NULL, "bad case %zu: no '%s' in: %s", i, where, msg);
        CHECK(strstr(msg, bad[i].needle) != NULL, "bad case %zu: no '%s' in: %s", i, bad[i].needle, msg);
        hr_model_free(m);
    }
}

static void test_files(void) {
    hr_model_t *m = hr_modelfile_load("/nonexistent/x.model");
    CHECK(!m && last_status() == HR_ERR_IO && strstr(hr_last_error(), "/nonexistent/x.model"),
          "missing file: %s", hr_last_error());
    char path[] = "/tmp/hr_test_modelfile.XXXXXX";
    int fd = mkstemp(path);
    if (fd >= 0) {
        const char text[] = "input 4\0\nloss MSELoss\n";
        CHECK(write(fd, text, sizeof text - 1) == (ssize_t)(sizeof text - 1), "write");
        close(fd);
        m = hr_modelfile_load(path);
        CHECK(!m && last_status() == HR_ERR_PARSE && strstr(hr_last_error(), "byte 7 is a NUL"), "NUL: %s",
              hr_last_error());
        unlink(path);
    }
    /* The model takes its name from the file. */
    m = hr_modelfile_load("examples/mlp.model");
    CHECK(m != NULL, "mlp loads");
    hr_model_free(m);
}

/* Every allocation fails in turn: NULL with HR_ERR_OOM, nothing leaked (valgrind). */
static void test_faults(void) {
    FILE *f = fopen("examples/resnet_tiny.model", "rb");
    if (!f) { CHECK(0, "examples/resnet_tiny.model not found (run from the repository root)"); return; }
    static char text[8192];
    size_t n = fread(text, 1, sizeof text - 1, f);
    text[n] = 0;
    fclose(f);
    hr_fault_fail_at(0);
    hr_model_free(hr_modelfile_parse(text, "resnet_tiny.model"));
    int64_t total = hr_fault_fail_at(0), failed = 0;
    for (int64_t k = 1; k <= total; k++) {
        hr_fault_fail_at(k);
        hr_model_t *m = hr_modelfile_parse(text, "resnet_tiny.model");
        hr_fault_fail_at(0);
        /* An allocation the library can do without may fail silently. */
        if (m) { hr_model_free(m); continue; }
        failed++;
        CHECK(last_status() == HR_ERR_OOM, "alloc %lld of %lld: %s", (long long)k, (long long)total, hr_last_error());
    }
    CHECK(total > 20 && failed > total / 2, "%lld of %lld failed allocations failed the parse", (long long)failed,
          (long long)total);
}

int main(void) {
    test_examples();
    test_syntax();
    test_bad();
    test_files();
    test_faults();
    TEST_END();
}
