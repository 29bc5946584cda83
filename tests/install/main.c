/* A program built against an installed adaptalloc: the umbrella header,
 * the shared library, a host pool and the policy API. */
#include <stdio.h>
#include <stdlib.h>

#include <adaptalloc/adaptalloc.h>

int main(void) {
  aa_backend *b = NULL;
  aa_pool *pool = NULL;
  aa_pool_config cfg;
  aa_policy *pol = NULL;
  void *p;
  int rc;

  rc = aa_backend_host_new(&b);
  if (rc != AA_OK)
    return 1;
  aa_pool_config_init(&cfg);
  cfg.backend = b;
  rc = aa_pool_new(&cfg, &pool);
  if (rc != AA_OK)
    return 2;
  p = aa_alloc(pool, 4096, NULL);
  if (p == NULL || aa_free(pool, p, 4096, NULL) != AA_OK)
    return 3;
  if (aa_policy_default(&pol) != AA_OK)
    return 4;
  aa_policy_free(pol);
  aa_pool_destroy(pool);
  aa_backend_destroy(b);
  printf("consumer ok: %s\n", aa_strerror(AA_OK));
  return 0;
}
