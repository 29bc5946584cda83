/*
 * standalone_main.c — runs a libFuzzer target over files without libFuzzer:
 * every regular file in the directories or files named on the command line
 * is fed once to LLVMFuzzerTestOneInput. Used to replay corpora and crash
 * reproducers in ordinary (and sanitizer) test builds.
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int run_file(const char *path) {
  FILE *f = fopen(path, "rb");
  uint8_t *buf = NULL;
  long len;
  int rc = 1;

  if (f == NULL) {
    fprintf(stderr, "cannot open %s\n", path);
    return 1;
  }
  if (fseek(f, 0, SEEK_END) != 0)
    goto out;
  len = ftell(f);
  if (len < 0 || fseek(f, 0, SEEK_SET) != 0)
    goto out;
  buf = malloc((size_t)len + 1);
  if (buf == NULL)
    goto out;
  if (len > 0 && fread(buf, 1, (size_t)len, f) != (size_t)len)
    goto out;
  LLVMFuzzerTestOneInput(buf, (size_t)len);
  rc = 0;
out:
  free(buf);
  fclose(f);
  return rc;
}

static int run_path(const char *path, unsigned *count) {
  struct stat st;
  DIR *d;
  struct dirent *e;
  int rc = 0;

  if (stat(path, &st) != 0) {
    fprintf(stderr, "no such corpus: %s\n", path);
    return 1;
  }
  if (!S_ISDIR(st.st_mode)) {
    (*count)++;
    return run_file(path);
  }
  d = opendir(path);
  if (d == NULL)
    return 1;
  while ((e = readdir(d)) != NULL) {
    char child[4096];
    if (e->d_name[0] == '.')
      continue;
    snprintf(child, sizeof(child), "%s/%s", path, e->d_name);
    rc |= run_path(child, count);
  }
  closedir(d);
  return rc;
}

int main(int argc, char **argv) {
  unsigned count = 0;
  int rc = 0;
  for (int i = 1; i < argc; i++)
    rc |= run_path(argv[i], &count);
  LLVMFuzzerTestOneInput((const uint8_t *)"", 0);
  printf("%u inputs replayed, %s\n", count, rc ? "with errors" : "ok");
  return rc;
}
