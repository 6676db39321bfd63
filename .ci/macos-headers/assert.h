/* Stub for compile-checking only (no macOS SDK here). */
#define assert(x) ((void)0)
