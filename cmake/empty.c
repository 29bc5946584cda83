/* Placeholder so that a module without sources yet still forms a target. */
typedef int aa__empty_translation_unit;
