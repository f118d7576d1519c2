echo '@@c68ec3b5c1d242f9a3aea3ad8ade516a begin 0'
symfonic-stream schemas check
__s=$?; printf '\n@@c68ec3b5c1d242f9a3aea3ad8ade516a end 0 %d\n' $__s; (exit $__s)
