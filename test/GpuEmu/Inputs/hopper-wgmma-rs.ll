; wgmma.mma_async m64n64k16 bf16 -> f32 with A from registers (RS): thread
; t's A fragment of step s is afrag[16 t + 4 s + q] (the ISA's layout); B is
; MN-major (imm-trans-b = 1: the layout of V in P.V) in the shared image,
; step s's descriptor descs[s].
; Otherwise as hopper-wgmma-ss.ll.
target triple = "nvptx64-nvidia-cuda"

@smem = external addrspace(3) global [0 x i8], align 1024

declare i32 @llvm.nvvm.read.ptx.sreg.tid.x()
declare void @llvm.nvvm.barrier.cta.sync.aligned.all(i32)
declare void @llvm.nvvm.fence.proxy.async.shared_cta()
declare void @llvm.nvvm.wgmma.fence.sync.aligned()
declare void @llvm.nvvm.wgmma.commit_group.sync.aligned()
declare void @llvm.nvvm.wgmma.wait_group.sync.aligned(i64 immarg)

define ptx_kernel void @wgmma_rs(ptr %afrag, ptr %img, i32 %bytes, ptr %descs, ptr %out) {
entry:
  %tid = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()
  %chunks = lshr i32 %bytes, 4
  br label %copy
copy:
  %i = phi i32 [ %tid, %entry ], [ %inext, %body ]
  %more = icmp ult i32 %i, %chunks
  br i1 %more, label %body, label %copied
body:
  %i16 = shl i32 %i, 4
  %i64 = zext i32 %i16 to i64
  %src = getelementptr i8, ptr %img, i64 %i64
  %v = load <4 x i32>, ptr %src, align 16
  %dst = getelementptr i8, ptr addrspace(3) @smem, i32 %i16
  store <4 x i32> %v, ptr addrspace(3) %dst, align 16
  %inext = add i32 %i, 128
  br label %copy
copied:
  call void @llvm.nvvm.fence.proxy.async.shared_cta()
  call void @llvm.nvvm.barrier.cta.sync.aligned.all(i32 0)
  %t16 = shl i32 %tid, 4
  %ao0_0 = add i32 %t16, 0
  %aw0_0 = zext i32 %ao0_0 to i64
  %ap0_0 = getelementptr i32, ptr %afrag, i64 %aw0_0
  %a0_0 = load i32, ptr %ap0_0, align 4
  %ao0_1 = add i32 %t16, 1
  %aw0_1 = zext i32 %ao0_1 to i64
  %ap0_1 = getelementptr i32, ptr %afrag, i64 %aw0_1
  %a0_1 = load i32, ptr %ap0_1, align 4
  %ao0_2 = add i32 %t16, 2
  %aw0_2 = zext i32 %ao0_2 to i64
  %ap0_2 = getelementptr i32, ptr %afrag, i64 %aw0_2
  %a0_2 = load i32, ptr %ap0_2, align 4
  %ao0_3 = add i32 %t16, 3
  %aw0_3 = zext i32 %ao0_3 to i64
  %ap0_3 = getelementptr i32, ptr %afrag, i64 %aw0_3
  %a0_3 = load i32, ptr %ap0_3, align 4
  %ao1_0 = add i32 %t16, 4
  %aw1_0 = zext i32 %ao1_0 to i64
  %ap1_0 = getelementptr i32, ptr %afrag, i64 %aw1_0
  %a1_0 = load i32, ptr %ap1_0, align 4
  %ao1_1 = add i32 %t16, 5
  %aw1_1 = zext i32 %ao1_1 to i64
  %ap1_1 = getelementptr i32, ptr %afrag, i64 %aw1_1
  %a1_1 = load i32, ptr %ap1_1, align 4
  %ao1_2 = add i32 %t16, 6
  %aw1_2 = zext i32 %ao1_2 to i64
  %ap1_2 = getelementptr i32, ptr %afrag, i64 %aw1_2
  %a1_2 = load i32, ptr %ap1_2, align 4
  %ao1_3 = add i32 %t16, 7
  %aw1_3 = zext i32 %ao1_3 to i64
  %ap1_3 = getelementptr i32, ptr %afrag, i64 %aw1_3
  %a1_3 = load i32, ptr %ap1_3, align 4
  %ao2_0 = add i32 %t16, 8
  %aw2_0 = zext i32 %ao2_0 to i64
  %ap2_0 = getelementptr i32, ptr %afrag, i64 %aw2_0
  %a2_0 = load i32, ptr %ap2_0, align 4
  %ao2_1 = add i32 %t16, 9
  %aw2_1 = zext i32 %ao2_1 to i64
  %ap2_1 = getelementptr i32, ptr %afrag, i64 %aw2_1
  %a2_1 = load i32, ptr %ap2_1, align 4
  %ao2_2 = add i32 %t16, 10
  %aw2_2 = zext i32 %ao2_2 to i64
  %ap2_2 = getelementptr i32, ptr %afrag, i64 %aw2_2
  %a2_2 = load i32, ptr %ap2_2, align 4
  %ao2_3 = add i32 %t16, 11
  %aw2_3 = zext i32 %ao2_3 to i64
  %ap2_3 = getelementptr i32, ptr %afrag, i64 %aw2_3
  %a2_3 = load i32, ptr %ap2_3, align 4
  %ao3_0 = add i32 %t16, 12
  %aw3_0 = zext i32 %ao3_0 to i64
  %ap3_0 = getelementptr i32, ptr %afrag, i64 %aw3_0
  %a3_0 = load i32, ptr %ap3_0, align 4
  %ao3_1 = add i32 %t16, 13
  %aw3_1 = zext i32 %ao3_1 to i64
  %ap3_1 = getelementptr i32, ptr %afrag, i64 %aw3_1
  %a3_1 = load i32, ptr %ap3_1, align 4
  %ao3_2 = add i32 %t16, 14
  %aw3_2 = zext i32 %ao3_2 to i64
  %ap3_2 = getelementptr i32, ptr %afrag, i64 %aw3_2
  %a3_2 = load i32, ptr %ap3_2, align 4
  %ao3_3 = add i32 %t16, 15
  %aw3_3 = zext i32 %ao3_3 to i64
  %ap3_3 = getelementptr i32, ptr %afrag, i64 %aw3_3
  %a3_3 = load i32, ptr %ap3_3, align 4
  call void @llvm.nvvm.wgmma.fence.sync.aligned()
  %pb0 = getelementptr i64, ptr %descs, i64 0
  %db0 = load i64, ptr %pb0, align 8
  %r0 = call { float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float } asm sideeffect "{\0A.reg .pred p;\0Asetp.ne.b32 p, $69, 0;\0Awgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {$0, $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21, $22, $23, $24, $25, $26, $27, $28, $29, $30, $31}, {$64, $65, $66, $67}, $68, p, $70, $71, $72;\0A}\0A", "=f,=f,=f,=f,=f,=f,=f,=f,=f,=f,=f,=f,=f,=f,=f,=f,=f,=f,=f,=f,=f,=f,=f,=f,=f,=f,=f,=f,=f,=f,=f,=f,0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31,r,r,r,r,l,r,n,n,n"(float 0.0, float 0.0, float 0.0, float 0.0, float 0.0, float 0.0, float 0.0, float 0.0, float 0.0, float 0.0, float 0.0, float 0.0, float 0.0, float 0.0, float 0.0, float 0.0, float 0.0, float 0.0, float 0.0, float 0.0, float 0.0, float 0.0, float 0.0, float 0.0, float 0.0, float 0.0, float 0.0, float 0.0, float 0.0, float 0.0, float 0.0, float 0.0, i32 %a0_0, i32 %a0_1, i32 %a0_2, i32 %a0_3, i64 %db0, i32 0, i32 1, i32 1, i32 1)
  %e0_0 = extractvalue { float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float } %r0, 0
  %e0_1 = extractvalue { float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float } %r0, 1
  %e0_2 = extractvalue { float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float } %r0, 2
  %e0_3 = extractvalue { float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float } %r0, 3
  %e0_4 = extractvalue { float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float } %r0, 4
  %e0_5 = extractvalue { float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float } %r0, 5
  %e0_6 = extractvalue { float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float } %r0, 6
  %e0_7 = extractvalue { float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float } %r0, 7
  %e0_8 = extractvalue { float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float } %r0, 8
  %e0_9 = extractvalue { float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float } %r0, 9
  %e0_10 = extractvalue { float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float } %r0, 10
  %e0_11 = extractvalue { float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float } %r0, 11
  %e0_12 = extractvalue { float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float } %r0, 12
  %e0_13 = extractvalue { float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float } %r0, 13
  %e0_14 = extractvalue { float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float } %r0, 14
  %e0_15 = extractvalue { float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float } %r0, 15
  %e0_16 = extractvalue { float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float } %r0, 16
  %e0_17 = extractvalue { float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float } %r0, 17
  %e0_18 = extractvalue { float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float } %r0, 18
  %e0_19 = extractvalue { float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float } %r0, 19
  %e0_20 = extractvalue { float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float } %r0, 20
  %e0_21 = extractvalue { float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float } %r0, 21
  %e0_22 = extractvalue { float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float } %r0, 22
  %e0_23 = extractvalue { float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float } %r0, 23
  %e0_24 = extractvalue { float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float } %r0, 24
  %e0_25 = extractvalue { float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float } %r0, 25
  %e0_26 = extractvalue { float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float } %r0, 26
  %e0_27 = extractvalue { float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float } %r0, 27
  %e0_28 = extractvalue { float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float } %r0, 28
  %e0_29 = extractvalue { float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float } %r0, 29
  %e0_30 = extractvalue { float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float } %r0, 30
  %e0_31 = extractvalue { float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float } %r0, 31
  %pb1 = getelementptr i64, ptr %descs, i64 1
  %db1 = load i64, ptr %pb1, align 8
  %r1 = call { float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float } asm sideeffect "{\0A.reg .pred p;\0Asetp.ne.b32 p, $69, 0;\0Awgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {$0, $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21, $22, $23, $24, $25, $26, $27, $28, $29, $30, $31}, {$64, $65, $66, $67}, $68, p, $70, $71, $72;\0A}\0A", "=f,=f,=f,=f,=f,=f,=f,=f,=f,=f,=f,=f,=f,=f,=f,=f,=f,=f,=f,=f,=f,=f,=f,=f,=f,=f,=f,=f,=f,=f,=f,=f,0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31,r,r,r,r,l,r,n,n,n"(float %e0_0, float %e0_1, float %e0_2, float %e0_3, float %e0_4, float %e0_5, float %e0_6, float %e0_7, float %e0_8, float %e0_9, float %e0_10, float %e0_11, float %e0_12, float %e0_13, float %e0_14, float %e0_15, float %e0_16, float %e0_17, float %e0_18, float %e0_19, float %e0_20, float %e0_21, float %e0_22, float %e0_23, float %e0_24, float %e0_25, float %e0_26, float %e0_27, float %e0_28, float %e0_29, float %e0_30, float %e0_31, i32 %a1_0, i32 %a1_1, i32 %a1_2, i32 %a1_3, i64 %db1, i32 1, i32 1, i32 1, i32 1)
  %e1_0 = extractvalue { float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float } %r1, 0
  %e1_1 = extractvalue { float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float } %r1, 1
  %e1_2 = extractvalue { float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float } %r1, 2
  %e1_3 = extractvalue { float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float } %r1, 3
  %e1_4 = extractvalue { float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float } %r1, 4
  %e1_5 = extractvalue { float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float } %r1, 5
  %e1_6 = extractvalue { float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float } %r1, 6
  %e1_7 = extractvalue { float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float } %r1, 7
  %e1_8 = extractvalue { float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float } %r1, 8
  %e1_9 = extractvalue { float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float } %r1, 9
  %e1_10 = extractvalue { float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float } %r1, 10
  %e1_11 = extractvalue { float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float } %r1, 11
  %e1_12 = extractvalue { float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float } %r1, 12
  %e1_13 = extractvalue { float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float } %r1, 13
  %e1_14 = extractvalue { float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float } %r1, 14
  %e1_15 = extractvalue { float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float } %r1, 15
  %e1_16 = extractvalue { float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float } %r1, 16
  %e1_17 = extractvalue { float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float } %r1, 17
  %e1_18 = extractvalue { float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float } %r1, 18
  %e1_19 = extractvalue { float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float } %r1, 19
  %e1_20 = extractvalue { float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float } %r1, 20
  %e1_21 = extractvalue { float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float } %r1, 21
  %e1_22 = extractvalue { float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float } %r1, 22
  %e1_23 = extractvalue { float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float } %r1, 23
  %e1_24 = extractvalue { float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float } %r1, 24
  %e1_25 = extractvalue { float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float } %r1, 25
  %e1_26 = extractvalue { float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float } %r1, 26
  %e1_27 = extractvalue { float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float } %r1, 27
  %e1_28 = extractvalue { float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float } %r1, 28
  %e1_29 = extractvalue { float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float } %r1, 29
  %e1_30 = extractvalue { float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float } %r1, 30
  %e1_31 = extractvalue { float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float } %r1, 31
  %pb2 = getelementptr i64, ptr %descs, i64 2
  %db2 = load i64, ptr %pb2, align 8
  %r2 = call { float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float } asm sideeffect "{\0A.reg .pred p;\0Asetp.ne.b32 p, $69, 0;\0Awgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {$0, $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21, $22, $23, $24, $25, $26, $27, $28, $29, $30, $31}, {$64, $65, $66, $67}, $68, p, $70, $71, $72;\0A}\0A", "=f,=f,=f,=f,=f,=f,=f,=f,=f,=f,=f,=f,=f,=f,=f,=f,=f,=f,=f,=f,=f,=f,=f,=f,=f,=f,=f,=f,=f,=f,=f,=f,0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31,r,r,r,r,l,r,n,n,n"(float %e1_0, float %e1_1, float %e1_2, float %e1_3, float %e1_4, float %e1_5, float %e1_6, float %e1_7, float %e1_8, float %e1_9, float %e1_10, float %e1_11, float %e1_12, float %e1_13, float %e1_14, float %e1_15, float %e1_16, float %e1_17, float %e1_18, float %e1_19, float %e1_20, float %e1_21, float %e1_22, float %e1_23, float %e1_24, float %e1_25, float %e1_26, float %e1_27, float %e1_28, float %e1_29, float %e1_30, float %e1_31, i32 %a2_0, i32 %a2_1, i32 %a2_2, i32 %a2_3, i64 %db2, i32 1, i32 1, i32 1, i32 1)
  %e2_0 = extractvalue { float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float } %r2, 0
  %e2_1 = extractvalue { float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float } %r2, 1
  %e2_2 = extractvalue { float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float } %r2, 2
  %e2_3 = extractvalue { float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float } %r2, 3
  %e2_4 = extractvalue { float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float } %r2, 4
  %e2_5 = extractvalue { float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float } %r2, 5
  %e2_6 = extractvalue { float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float } %r2, 6
  %e2_7 = extractvalue { float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float } %r2, 7
  %e2_8 = extractvalue { float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float } %r2, 8
  %e2_9 = extractvalue { float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float } %r2, 9
  %e2_10 = extractvalue { float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float } %r2, 10
  %e2_11 = extractvalue { float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float } %r2, 11
  %e2_12 = extractvalue { float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float } %r2, 12
  %e2_13 = extractvalue { float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float } %r2, 13
  %e2_14 = extractvalue { float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float } %r2, 14
  %e2_15 = extractvalue { float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float } %r2, 15
  %e2_16 = extractvalue { float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float } %r2, 16
  %e2_17 = extractvalue { float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float } %r2, 17
  %e2_18 = extractvalue { float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float } %r2, 18
  %e2_19 = extractvalue { float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float } %r2, 19
  %e2_20 = extractvalue { float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float } %r2, 20
  %e2_21 = extractvalue { float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float } %r2, 21
  %e2_22 = extractvalue { float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float } %r2, 22
  %e2_23 = extractvalue { float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float } %r2, 23
  %e2_24 = extractvalue { float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float } %r2, 24
  %e2_25 = extractvalue { float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float } %r2, 25
  %e2_26 = extractvalue { float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float } %r2, 26
  %e2_27 = extractvalue { float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float } %r2, 27
  %e2_28 = extractvalue { float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float } %r2, 28
  %e2_29 = extractvalue { float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float } %r2, 29
  %e2_30 = extractvalue { float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float } %r2, 30
  %e2_31 = extractvalue { float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float } %r2, 31
  %pb3 = getelementptr i64, ptr %descs, i64 3
  %db3 = load i64, ptr %pb3, align 8
  %r3 = call { float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float } asm sideeffect "{\0A.reg .pred p;\0Asetp.ne.b32 p, $69, 0;\0Awgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {$0, $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21, $22, $23, $24, $25, $26, $27, $28, $29, $30, $31}, {$64, $65, $66, $67}, $68, p, $70, $71, $72;\0A}\0A", "=f,=f,=f,=f,=f,=f,=f,=f,=f,=f,=f,=f,=f,=f,=f,=f,=f,=f,=f,=f,=f,=f,=f,=f,=f,=f,=f,=f,=f,=f,=f,=f,0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31,r,r,r,r,l,r,n,n,n"(float %e2_0, float %e2_1, float %e2_2, float %e2_3, float %e2_4, float %e2_5, float %e2_6, float %e2_7, float %e2_8, float %e2_9, float %e2_10, float %e2_11, float %e2_12, float %e2_13, float %e2_14, float %e2_15, float %e2_16, float %e2_17, float %e2_18, float %e2_19, float %e2_20, float %e2_21, float %e2_22, float %e2_23, float %e2_24, float %e2_25, float %e2_26, float %e2_27, float %e2_28, float %e2_29, float %e2_30, float %e2_31, i32 %a3_0, i32 %a3_1, i32 %a3_2, i32 %a3_3, i64 %db3, i32 1, i32 1, i32 1, i32 1)
  %e3_0 = extractvalue { float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float } %r3, 0
  %e3_1 = extractvalue { float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float } %r3, 1
  %e3_2 = extractvalue { float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float } %r3, 2
  %e3_3 = extractvalue { float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float } %r3, 3
  %e3_4 = extractvalue { float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float } %r3, 4
  %e3_5 = extractvalue { float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float } %r3, 5
  %e3_6 = extractvalue { float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float } %r3, 6
  %e3_7 = extractvalue { float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float } %r3, 7
  %e3_8 = extractvalue { float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float } %r3, 8
  %e3_9 = extractvalue { float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float } %r3, 9
  %e3_10 = extractvalue { float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float } %r3, 10
  %e3_11 = extractvalue { float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float } %r3, 11
  %e3_12 = extractvalue { float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float } %r3, 12
  %e3_13 = extractvalue { float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float } %r3, 13
  %e3_14 = extractvalue { float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float } %r3, 14
  %e3_15 = extractvalue { float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float } %r3, 15
  %e3_16 = extractvalue { float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float } %r3, 16
  %e3_17 = extractvalue { float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float } %r3, 17
  %e3_18 = extractvalue { float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float } %r3, 18
  %e3_19 = extractvalue { float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float } %r3, 19
  %e3_20 = extractvalue { float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float } %r3, 20
  %e3_21 = extractvalue { float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float } %r3, 21
  %e3_22 = extractvalue { float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float } %r3, 22
  %e3_23 = extractvalue { float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float } %r3, 23
  %e3_24 = extractvalue { float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float } %r3, 24
  %e3_25 = extractvalue { float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float } %r3, 25
  %e3_26 = extractvalue { float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float } %r3, 26
  %e3_27 = extractvalue { float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float } %r3, 27
  %e3_28 = extractvalue { float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float } %r3, 28
  %e3_29 = extractvalue { float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float } %r3, 29
  %e3_30 = extractvalue { float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float } %r3, 30
  %e3_31 = extractvalue { float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float, float } %r3, 31
  call void @llvm.nvvm.wgmma.commit_group.sync.aligned()
  call void @llvm.nvvm.wgmma.wait_group.sync.aligned(i64 0)
  %tb = mul i32 %tid, 32
  %o0 = add i32 %tb, 0
  %ow0 = zext i32 %o0 to i64
  %op0 = getelementptr float, ptr %out, i64 %ow0
  store float %e3_0, ptr %op0, align 4
  %o1 = add i32 %tb, 1
  %ow1 = zext i32 %o1 to i64
  %op1 = getelementptr float, ptr %out, i64 %ow1
  store float %e3_1, ptr %op1, align 4
  %o2 = add i32 %tb, 2
  %ow2 = zext i32 %o2 to i64
  %op2 = getelementptr float, ptr %out, i64 %ow2
  store float %e3_2, ptr %op2, align 4
  %o3 = add i32 %tb, 3
  %ow3 = zext i32 %o3 to i64
  %op3 = getelementptr float, ptr %out, i64 %ow3
  store float %e3_3, ptr %op3, align 4
  %o4 = add i32 %tb, 4
  %ow4 = zext i32 %o4 to i64
  %op4 = getelementptr float, ptr %out, i64 %ow4
  store float %e3_4, ptr %op4, align 4
  %o5 = add i32 %tb, 5
  %ow5 = zext i32 %o5 to i64
  %op5 = getelementptr float, ptr %out, i64 %ow5
  store float %e3_5, ptr %op5, align 4
  %o6 = add i32 %tb, 6
  %ow6 = zext i32 %o6 to i64
  %op6 = getelementptr float, ptr %out, i64 %ow6
  store float %e3_6, ptr %op6, align 4
  %o7 = add i32 %tb, 7
  %ow7 = zext i32 %o7 to i64
  %op7 = getelementptr float, ptr %out, i64 %ow7
  store float %e3_7, ptr %op7, align 4
  %o8 = add i32 %tb, 8
  %ow8 = zext i32 %o8 to i64
  %op8 = getelementptr float, ptr %out, i64 %ow8
  store float %e3_8, ptr %op8, align 4
  %o9 = add i32 %tb, 9
  %ow9 = zext i32 %o9 to i64
  %op9 = getelementptr float, ptr %out, i64 %ow9
  store float %e3_9, ptr %op9, align 4
  %o10 = add i32 %tb, 10
  %ow10 = zext i32 %o10 to i64
  %op10 = getelementptr float, ptr %out, i64 %ow10
  store float %e3_10, ptr %op10, align 4
  %o11 = add i32 %tb, 11
  %ow11 = zext i32 %o11 to i64
  %op11 = getelementptr float, ptr %out, i64 %ow11
  store float %e3_11, ptr %op11, align 4
  %o12 = add i32 %tb, 12
  %ow12 = zext i32 %o12 to i64
  %op12 = getelementptr float, ptr %out, i64 %ow12
  store float %e3_12, ptr %op12, align 4
  %o13 = add i32 %tb, 13
  %ow13 = zext i32 %o13 to i64
  %op13 = getelementptr float, ptr %out, i64 %ow13
  store float %e3_13, ptr %op13, align 4
  %o14 = add i32 %tb, 14
  %ow14 = zext i32 %o14 to i64
  %op14 = getelementptr float, ptr %out, i64 %ow14
  store float %e3_14, ptr %op14, align 4
  %o15 = add i32 %tb, 15
  %ow15 = zext i32 %o15 to i64
  %op15 = getelementptr float, ptr %out, i64 %ow15
  store float %e3_15, ptr %op15, align 4
  %o16 = add i32 %tb, 16
  %ow16 = zext i32 %o16 to i64
  %op16 = getelementptr float, ptr %out, i64 %ow16
  store float %e3_16, ptr %op16, align 4
  %o17 = add i32 %tb, 17
  %ow17 = zext i32 %o17 to i64
  %op17 = getelementptr float, ptr %out, i64 %ow17
  store float %e3_17, ptr %op17, align 4
  %o18 = add i32 %tb, 18
  %ow18 = zext i32 %o18 to i64
  %op18 = getelementptr float, ptr %out, i64 %ow18
  store float %e3_18, ptr %op18, align 4
  %o19 = add i32 %tb, 19
  %ow19 = zext i32 %o19 to i64
  %op19 = getelementptr float, ptr %out, i64 %ow19
  store float %e3_19, ptr %op19, align 4
  %o20 = add i32 %tb, 20
  %ow20 = zext i32 %o20 to i64
  %op20 = getelementptr float, ptr %out, i64 %ow20
  store float %e3_20, ptr %op20, align 4
  %o21 = add i32 %tb, 21
  %ow21 = zext i32 %o21 to i64
  %op21 = getelementptr float, ptr %out, i64 %ow21
  store float %e3_21, ptr %op21, align 4
  %o22 = add i32 %tb, 22
  %ow22 = zext i32 %o22 to i64
  %op22 = getelementptr float, ptr %out, i64 %ow22
  store float %e3_22, ptr %op22, align 4
  %o23 = add i32 %tb, 23
  %ow23 = zext i32 %o23 to i64
  %op23 = getelementptr float, ptr %out, i64 %ow23
  store float %e3_23, ptr %op23, align 4
  %o24 = add i32 %tb, 24
  %ow24 = zext i32 %o24 to i64
  %op24 = getelementptr float, ptr %out, i64 %ow24
  store float %e3_24, ptr %op24, align 4
  %o25 = add i32 %tb, 25
  %ow25 = zext i32 %o25 to i64
  %op25 = getelementptr float, ptr %out, i64 %ow25
  store float %e3_25, ptr %op25, align 4
  %o26 = add i32 %tb, 26
  %ow26 = zext i32 %o26 to i64
  %op26 = getelementptr float, ptr %out, i64 %ow26
  store float %e3_26, ptr %op26, align 4
  %o27 = add i32 %tb, 27
  %ow27 = zext i32 %o27 to i64
  %op27 = getelementptr float, ptr %out, i64 %ow27
  store float %e3_27, ptr %op27, align 4
  %o28 = add i32 %tb, 28
  %ow28 = zext i32 %o28 to i64
  %op28 = getelementptr float, ptr %out, i64 %ow28
  store float %e3_28, ptr %op28, align 4
  %o29 = add i32 %tb, 29
  %ow29 = zext i32 %o29 to i64
  %op29 = getelementptr float, ptr %out, i64 %ow29
  store float %e3_29, ptr %op29, align 4
  %o30 = add i32 %tb, 30
  %ow30 = zext i32 %o30 to i64
  %op30 = getelementptr float, ptr %out, i64 %ow30
  store float %e3_30, ptr %op30, align 4
  %o31 = add i32 %tb, 31
  %ow31 = zext i32 %o31 to i64
  %op31 = getelementptr float, ptr %out, i64 %ow31
  store float %e3_31, ptr %op31, align 4
  ret void
}
