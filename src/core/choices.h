/* choices.h — a small text file of choices measured on this machine, kept
 * between runs (choices.c; the CUDA backend's timed convolution algorithms:
 * backend/cuda/conv_cache.c). */
#ifndef HR_CHOICES_H
#define HR_CHOICES_H

#include "core/core.h"

/* A text file in a cache folder, a line a choice: KEY \t A \t B \t C (A, B,
 * C integers, C >= 0; a key of fewer than HR_CHOICE_KEY bytes, no tab or
 * newline, not starting with '#', a comment's mark). Nothing about it fails
 * a job: what does not parse is skipped. */
#define HR_CHOICE_KEY 256
typedef struct hr_choices hr_choices;
/* Reads dir/name (missing or unreadable: empty). NULL only without memory. */
hr_choices *hr_choices_open(const char *dir, const char *name);
/* Adds the choices of buf[0, n) that k lacks; false when memory ran out. */
bool hr_choices_parse(hr_choices *k, const char *buf, size_t n);
bool hr_choices_get(const hr_choices *k, const char *key, int64_t v[3]);
/* Adds or replaces one; false for a key or values the file cannot hold, or
 * without memory. */
bool hr_choices_put(hr_choices *k, const char *key, const int64_t v[3]);
/* Every choice as lines, after "# comment" when one is given. */
void hr_choices_write(const hr_choices *k, FILE *f, const char *comment);
/* With choices put since it was read: merges what the file holds now (k's
 * own win) and rewrites it whole (the folder made if needed); a status. */
hr_status hr_choices_save(hr_choices *k, const char *comment);
const char *hr_choices_path(const hr_choices *k);
int hr_choices_count(const hr_choices *k);
void hr_choices_free(hr_choices *k);

#endif
