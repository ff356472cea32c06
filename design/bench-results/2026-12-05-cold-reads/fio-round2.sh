#!/bin/bash
# Round 2: same as round 1, but buffered runs inside a 256 MiB cgroup (v1) so the page cache cannot hold the file.
F=/tmp/hot-fio/file
CG=/sys/fs/cgroup/memory/hot-fio
mkdir -p $CG; echo $((256<<20)) > $CG/memory.limit_in_bytes
uptime
for mode in direct buffered; do
  if [ $mode = direct ]; then D=1; else D=0; fi
  for qd in 1 32; do
    sync; echo 3 > /proc/sys/vm/drop_caches
    if [ $qd = 1 ]; then ARGS="--ioengine=psync"; elif [ $mode = direct ]; then ARGS="--ioengine=libaio --iodepth=32"; else ARGS="--ioengine=psync --numjobs=32"; fi
    if [ $mode = buffered ]; then
      sh -c "echo \$\$ > $CG/tasks; exec fio --name=r-$mode-qd$qd --filename=$F --size=4G --rw=randread --bs=4k --direct=$D $ARGS --runtime=10 --time_based --randrepeat=0 --norandommap --group_reporting"
    else
      fio --name=r-$mode-qd$qd --filename=$F --size=4G --rw=randread --bs=4k --direct=$D $ARGS --runtime=10 --time_based --randrepeat=0 --norandommap --group_reporting
    fi
    uptime
  done
done
rmdir $CG
