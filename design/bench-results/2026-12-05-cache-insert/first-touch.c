#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
static double now(){struct timespec t;clock_gettime(CLOCK_THREAD_CPUTIME_ID,&t);return t.tv_sec+t.tv_nsec*1e-9;}
int main(int argc,char**argv){
  int huge=atoi(argv[1]); size_t n=(128u<<20)/8;
  size_t bytes=n*8+(2u<<20);
  char*raw=mmap(0,bytes,PROT_READ|PROT_WRITE,MAP_PRIVATE|MAP_ANONYMOUS,-1,0);
  uint64_t*b=(uint64_t*)(((uintptr_t)raw+(2u<<20)-1)&~((uintptr_t)(2u<<20)-1));
  if(huge) madvise(b,n*8,MADV_HUGEPAGE);
  double t0=now(); memset(b,0xff,n*8); double t1=now();
  printf("fill %.3fs\n",t1-t0);
  uint64_t x=88172645463325252ull, s=0; size_t m=n-1;
  t0=now();
  for(int i=0;i<5000000;i++){x^=x<<13;x^=x>>7;x^=x<<17; s+=b[x&m];}
  t1=now(); printf("random loads %.1f ns/op (%lu)\n",(t1-t0)/5e6*1e9,s&1);
  // sequential first-touch of 256MB
  size_t sn=256u<<20; char*sr=mmap(0,sn+(2u<<20),PROT_READ|PROT_WRITE,MAP_PRIVATE|MAP_ANONYMOUS,-1,0);
  char*sp=(char*)(((uintptr_t)sr+(2u<<20)-1)&~((uintptr_t)(2u<<20)-1));
  if(huge) madvise(sp,sn,MADV_HUGEPAGE);
  t0=now(); for(size_t i=0;i<sn;i+=64) sp[i]=1; t1=now();
  printf("first touch %.2f ns per 64B line\n",(t1-t0)/(sn/64)*1e9);
  FILE*f=fopen("/proc/self/smaps_rollup","r"); char line[256]; while(fgets(line,256,f)) if(strstr(line,"AnonHuge")) fputs(line,stdout);
}
