#!/bin/bash
# fio random 4 KiB reads on /dev/vda (ext4), 4 GiB file, QD1 and QD32, direct and buffered.
set -x
F=/tmp/hot-fio/file
fio --name=lay --filename=$F --size=4G --rw=write --bs=1M --direct=1 --ioengine=libaio --iodepth=8 >/dev/null
uptime
for mode in direct buffered; do
  if [ $mode = direct ]; then D=1; else D=0; fi
  for qd in 1 32; do
    sync; echo 3 > /proc/sys/vm/drop_caches
    if [ $qd = 1 ]; then
      fio --name=r-$mode-qd1 --filename=$F --size=4G --rw=randread --bs=4k --direct=$D --ioengine=psync --runtime=10 --time_based --randrepeat=0 --norandommap --group_reporting
    elif [ $mode = direct ]; then
      fio --name=r-$mode-qd32 --filename=$F --size=4G --rw=randread --bs=4k --direct=1 --ioengine=libaio --iodepth=32 --runtime=10 --time_based --randrepeat=0 --norandommap --group_reporting
    else
      # buffered reads are synchronous in libaio: 32 threads of psync give 32 in flight
      fio --name=r-$mode-qd32 --filename=$F --size=4G --rw=randread --bs=4k --direct=0 --ioengine=psync --numjobs=32 --runtime=10 --time_based --randrepeat=0 --norandommap --group_reporting
    fi
    uptime
  done
done
