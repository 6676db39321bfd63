/*
 * bcryptprimitives.dll for Wine 8.0: exports ProcessPrng, nothing else.
 *
 * Rust's std (since 1.78) imports ProcessPrng from bcryptprimitives.dll for
 * its random numbers (HashMap keys, among others), and every Rust
 * executable therefore fails to load where that DLL is missing. Debian 12's
 * Wine 8.0 is such a place: it has bcrypt.dll but not bcryptprimitives.dll.
 * This DLL is built with mingw-w64 by
 * .ci/windows-env and put in the Wine prefix's system32, and only there: it
 * is a test fixture for running the Windows build under Wine, never shipped
 * (every Windows since 8 has the real one).
 *
 * ProcessPrng fills the buffer through RtlGenRandom (advapi32's
 * SystemFunction036), which Wine implements on the host's random source.
 * RtlGenRandom takes a ULONG length, so a larger buffer is filled in chunks.
 * The real ProcessPrng always returns TRUE; this one returns FALSE if
 * RtlGenRandom ever fails, which std turns into a panic rather than
 * silently using an unfilled buffer.
 */
#include <windows.h>

BOOLEAN WINAPI SystemFunction036(PVOID buffer, ULONG length);

__declspec(dllexport) BOOL WINAPI ProcessPrng(PBYTE data, SIZE_T len)
{
    while (len > 0) {
        ULONG chunk = len > 0x40000000 ? 0x40000000 : (ULONG)len;
        if (!SystemFunction036(data, chunk))
            return FALSE;
        data += chunk;
        len -= chunk;
    }
    return TRUE;
}
