echo '@@af68eb1252bb44bfbd2d04dbeb4dafe7 begin 0'
symfonic-stream schemas check
__s=$?; printf '\n@@af68eb1252bb44bfbd2d04dbeb4dafe7 end 0 %d\n' $__s; (exit $__s)
