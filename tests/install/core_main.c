/* A program built against the installed allocator alone (adaptalloc::core,
 * adaptalloc-core.pc): <adaptalloc/core.h>, a host pool, the class ladder. */
#include <stdio.h>

#include <adaptalloc/core.h>

int main(void) {
  aa_backend *b = NULL;
  aa_pool *pool = NULL;
  aa_pool_config cfg;
  void *small, *large;

  if (aa_backend_host_new(&b) != AA_OK)
    return 1;
  aa_pool_config_init(&cfg);
  cfg.backend = b;
  if (aa_pool_new(&cfg, &pool) != AA_OK)
    return 2;
  small = aa_alloc(pool, 4096, NULL);
  large = aa_alloc(pool, (size_t)8 << 20, NULL);
  if (small == NULL || large == NULL)
    return 3;
  if (aa_free(pool, small, 4096, NULL) != AA_OK ||
      aa_free(pool, large, (size_t)8 << 20, NULL) != AA_OK)
    return 4;
  if (aa_class_ladder(AA_DEFAULT_MIN_BLOCK, AA_DEFAULT_MAX_SMALL,
                      AA_DEFAULT_PER_DOUBLING, NULL, 0) != 40)
    return 5;
  aa_pool_destroy(pool);
  aa_backend_destroy(b);
  printf("core consumer ok\n");
  return 0;
}
