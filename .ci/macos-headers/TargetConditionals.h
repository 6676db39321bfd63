/* Stub for compile-checking only (no macOS SDK here). */
#define TARGET_OS_OSX 1
#define TARGET_OS_IPHONE 0
#define TARGET_OS_IOS 0
#define TARGET_OS_MAC 1
