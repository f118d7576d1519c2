__s=0
echo '@@56b6f02374c54396b846017aea44d16c begin 0'; (exit $__s)
symfonic-stream schemas check
__s=$?; printf '\n@@56b6f02374c54396b846017aea44d16c end 0 %d\n' $__s
