# Sourced by scripts/sanitize.sh address and scripts/sanitize-smoke.sh: exports the options of
# AddressSanitizer (leaks detected), LeakSanitizer and UndefinedBehaviorSanitizer (a report ends
# the process), with this folder's suppressions.
#
#     . scripts/sanitize/address-options.sh "OPTIONS FOR EVERY REPORT"   (log_path=..., exitcode=...; or "")
supp_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export ASAN_OPTIONS="${1:+$1 }detect_leaks=1 strict_string_checks=1 check_initialization_order=1"
export LSAN_OPTIONS="suppressions=$supp_dir/lsan.supp print_suppressions=0"
export UBSAN_OPTIONS="${1:+$1 }print_stacktrace=1 halt_on_error=1 suppressions=$supp_dir/ubsan.supp"
