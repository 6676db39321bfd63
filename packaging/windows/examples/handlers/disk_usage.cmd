@echo off
rem An exec handler for neko-sidecar in cmd, the Windows counterpart of
rem disk_usage.sh: the `disk_usage` tool (no arguments), run once per call.
rem
rem stdin:  the callback JSON (left unread: a handler may ignore it).
rem env:    NEKO_TOOL_NAME, NEKO_CALL_ID, plus the manifest's `env`; DISK_PATH
rem         (default: the working directory) says which disk to report.
rem stdout: plain text, which the sidecar turns into a string output. Print an
rem         envelope instead to report a failure the model should read, e.g.
rem         {"output": {"error": "MSG"}, "is_error": true, "error": "MSG"}:
rem         main_server shows the model `output` alone (`is_error` and `error`
rem         go to its logs), so the message goes in `output`.
rem A non-zero exit is reported to the model with the end of stderr.
rem
rem cmd has no command for a disk's size that works on every Windows without
rem administrator rights, so this reports the free space: the last number of
rem the last line of `dir`, whatever the language of the words around it
rem ("2 Dir(s)  123 bytes free", "2 个目录 123 可用字节").
setlocal EnableDelayedExpansion
if not defined DISK_PATH set "DISK_PATH=."
for %%D in ("%DISK_PATH%") do set "where=%%~fD"
echo %NEKO_CALL_ID%: disk usage of !where! 1>&2
set "last="
for /f "delims=" %%L in ('dir /-c "!where!"') do set "last=%%L"
set "free="
call :last_number !last!
if not defined free (
  echo cannot read the free space of !where! from `dir` 1>&2
  exit /b 1
)
rem Whole gigabytes of 10^9 bytes, cut as text: cmd's numbers are 32-bit.
set "gb=0"
if not "%free:~9%"=="" set "gb=%free:~0,-9%"
echo !gb! GB free (!free! bytes) on !where!
exit /b 0

rem Sets `free` to the last of its arguments that is all digits.
:last_number
if "%~1"=="" exit /b 0
set "digits=yes"
for /f "delims=0123456789" %%X in ("%~1") do set "digits="
if defined digits set "free=%~1"
shift
goto last_number
