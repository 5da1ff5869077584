/*
 * The KVM probe guest (see ../kvm.go). qemu maps the 64 KiB image at the
 * top of 4 GiB and, aliased, at 0xF0000; the Go side places a jump to
 * 0xF000:0000 at the reset vector (image offset 0xFFF0) and this code at
 * offset 0, so it runs at linear address 0xF0000.
 *
 * It does what a Linux kernel's entry does before anything else: real mode
 * -> 32-bit protected mode -> paging with PAE -> long mode (EFER.LME) ->
 * a 64-bit code segment, then CPUID and RDTSC, and writes 0x31 to qemu's
 * isa-debug-exit port 0xF4 (qemu exits with status 99). A vCPU that cannot
 * run a 64-bit guest never gets there: qemu aborts, or the probe's time
 * limit cuts it off.
 *
 * Build (the Go test TestProbePayloadMatchesSource checks probe.bin is
 * this file's output):
 *   as --32 -o probe.o probe.S && ld -m elf_i386 -Ttext=0 --oformat binary -o probe.bin probe.o
 */
	.set BASE, 0xF0000
	.set PML4, 0x1000
	.set PDPT, 0x2000
	.set PD,   0x3000

	.text
	.code16
	.globl _start
_start:
	cli
	cld
	lgdtl %cs:gdtr
	movl %cr0, %eax
	orl $1, %eax			/* CR0.PE */
	movl %eax, %cr0
	ljmpl $0x08, $(BASE + pm32)

	.code32
pm32:
	movw $0x10, %ax
	movw %ax, %ds
	movw %ax, %es
	movw %ax, %ss
	movl $PML4, %edi		/* zero the three tables */
	xorl %eax, %eax
	movl $(3 * 1024), %ecx
	rep stosl
	movl $(PDPT | 3), PML4		/* present, writable */
	movl $(PD | 3), PDPT
	movl $0x83, PD			/* 2 MiB identity page: present, writable, PS */
	movl %cr4, %eax
	orl $0x20, %eax			/* CR4.PAE */
	movl %eax, %cr4
	movl $PML4, %eax
	movl %eax, %cr3
	movl $0xC0000080, %ecx		/* EFER */
	rdmsr
	orl $0x100, %eax		/* EFER.LME */
	wrmsr
	movl %cr0, %eax
	orl $0x80000000, %eax		/* CR0.PG: long mode becomes active */
	movl %eax, %cr0
	ljmpl $0x18, $(BASE + lm64)

	.code64
lm64:
	xorl %eax, %eax
	cpuid
	rdtsc
	movq $0x31, %rax
	outb %al, $0xF4
1:	hlt
	jmp 1b

	.p2align 3
gdt:
	.quad 0
	.quad 0x00CF9A000000FFFF	/* 0x08: 32-bit code, base 0, 4 GiB */
	.quad 0x00CF92000000FFFF	/* 0x10: data, base 0, 4 GiB */
	.quad 0x00209A0000000000	/* 0x18: 64-bit code */
gdt_end:
gdtr:
	.word gdt_end - gdt - 1
	.long BASE + gdt
