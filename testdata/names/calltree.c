/*
 * calltree.c: 50 functions ct_00 .. ct_49 calling each other as a binary
 * tree (ct_K calls ct_2K+1 and ct_2K+2 when they exist), so that one call of
 * ct_00 calls every one of them once, nested 6 deep. Each returns its depth
 * plus what its callees returned. Generated once by a few lines of Python;
 * edit by hand if needed.
 */
#define NOIPA __attribute__((noipa))

int ct_00(int depth);
int ct_01(int depth);
int ct_02(int depth);
int ct_03(int depth);
int ct_04(int depth);
int ct_05(int depth);
int ct_06(int depth);
int ct_07(int depth);
int ct_08(int depth);
int ct_09(int depth);
int ct_10(int depth);
int ct_11(int depth);
int ct_12(int depth);
int ct_13(int depth);
int ct_14(int depth);
int ct_15(int depth);
int ct_16(int depth);
int ct_17(int depth);
int ct_18(int depth);
int ct_19(int depth);
int ct_20(int depth);
int ct_21(int depth);
int ct_22(int depth);
int ct_23(int depth);
int ct_24(int depth);
int ct_25(int depth);
int ct_26(int depth);
int ct_27(int depth);
int ct_28(int depth);
int ct_29(int depth);
int ct_30(int depth);
int ct_31(int depth);
int ct_32(int depth);
int ct_33(int depth);
int ct_34(int depth);
int ct_35(int depth);
int ct_36(int depth);
int ct_37(int depth);
int ct_38(int depth);
int ct_39(int depth);
int ct_40(int depth);
int ct_41(int depth);
int ct_42(int depth);
int ct_43(int depth);
int ct_44(int depth);
int ct_45(int depth);
int ct_46(int depth);
int ct_47(int depth);
int ct_48(int depth);
int ct_49(int depth);

NOIPA int ct_00(int depth)
{
	int sum = depth;
	sum += ct_01(depth + 1);
	sum += ct_02(depth + 1);
	return sum;
}

NOIPA int ct_01(int depth)
{
	int sum = depth;
	sum += ct_03(depth + 1);
	sum += ct_04(depth + 1);
	return sum;
}

NOIPA int ct_02(int depth)
{
	int sum = depth;
	sum += ct_05(depth + 1);
	sum += ct_06(depth + 1);
	return sum;
}

NOIPA int ct_03(int depth)
{
	int sum = depth;
	sum += ct_07(depth + 1);
	sum += ct_08(depth + 1);
	return sum;
}

NOIPA int ct_04(int depth)
{
	int sum = depth;
	sum += ct_09(depth + 1);
	sum += ct_10(depth + 1);
	return sum;
}

NOIPA int ct_05(int depth)
{
	int sum = depth;
	sum += ct_11(depth + 1);
	sum += ct_12(depth + 1);
	return sum;
}

NOIPA int ct_06(int depth)
{
	int sum = depth;
	sum += ct_13(depth + 1);
	sum += ct_14(depth + 1);
	return sum;
}

NOIPA int ct_07(int depth)
{
	int sum = depth;
	sum += ct_15(depth + 1);
	sum += ct_16(depth + 1);
	return sum;
}

NOIPA int ct_08(int depth)
{
	int sum = depth;
	sum += ct_17(depth + 1);
	sum += ct_18(depth + 1);
	return sum;
}

NOIPA int ct_09(int depth)
{
	int sum = depth;
	sum += ct_19(depth + 1);
	sum += ct_20(depth + 1);
	return sum;
}

NOIPA int ct_10(int depth)
{
	int sum = depth;
	sum += ct_21(depth + 1);
	sum += ct_22(depth + 1);
	return sum;
}

NOIPA int ct_11(int depth)
{
	int sum = depth;
	sum += ct_23(depth + 1);
	sum += ct_24(depth + 1);
	return sum;
}

NOIPA int ct_12(int depth)
{
	int sum = depth;
	sum += ct_25(depth + 1);
	sum += ct_26(depth + 1);
	return sum;
}

NOIPA int ct_13(int depth)
{
	int sum = depth;
	sum += ct_27(depth + 1);
	sum += ct_28(depth + 1);
	return sum;
}

NOIPA int ct_14(int depth)
{
	int sum = depth;
	sum += ct_29(depth + 1);
	sum += ct_30(depth + 1);
	return sum;
}

NOIPA int ct_15(int depth)
{
	int sum = depth;
	sum += ct_31(depth + 1);
	sum += ct_32(depth + 1);
	return sum;
}

NOIPA int ct_16(int depth)
{
	int sum = depth;
	sum += ct_33(depth + 1);
	sum += ct_34(depth + 1);
	return sum;
}

NOIPA int ct_17(int depth)
{
	int sum = depth;
	sum += ct_35(depth + 1);
	sum += ct_36(depth + 1);
	return sum;
}

NOIPA int ct_18(int depth)
{
	int sum = depth;
	sum += ct_37(depth + 1);
	sum += ct_38(depth + 1);
	return sum;
}

NOIPA int ct_19(int depth)
{
	int sum = depth;
	sum += ct_39(depth + 1);
	sum += ct_40(depth + 1);
	return sum;
}

NOIPA int ct_20(int depth)
{
	int sum = depth;
	sum += ct_41(depth + 1);
	sum += ct_42(depth + 1);
	return sum;
}

NOIPA int ct_21(int depth)
{
	int sum = depth;
	sum += ct_43(depth + 1);
	sum += ct_44(depth + 1);
	return sum;
}

NOIPA int ct_22(int depth)
{
	int sum = depth;
	sum += ct_45(depth + 1);
	sum += ct_46(depth + 1);
	return sum;
}

NOIPA int ct_23(int depth)
{
	int sum = depth;
	sum += ct_47(depth + 1);
	sum += ct_48(depth + 1);
	return sum;
}

NOIPA int ct_24(int depth)
{
	int sum = depth;
	sum += ct_49(depth + 1);
	return sum;
}

NOIPA int ct_25(int depth)
{
	int sum = depth;
	return sum;
}

NOIPA int ct_26(int depth)
{
	int sum = depth;
	return sum;
}

NOIPA int ct_27(int depth)
{
	int sum = depth;
	return sum;
}

NOIPA int ct_28(int depth)
{
	int sum = depth;
	return sum;
}

NOIPA int ct_29(int depth)
{
	int sum = depth;
	return sum;
}

NOIPA int ct_30(int depth)
{
	int sum = depth;
	return sum;
}

NOIPA int ct_31(int depth)
{
	int sum = depth;
	return sum;
}

NOIPA int ct_32(int depth)
{
	int sum = depth;
	return sum;
}

NOIPA int ct_33(int depth)
{
	int sum = depth;
	return sum;
}

NOIPA int ct_34(int depth)
{
	int sum = depth;
	return sum;
}

NOIPA int ct_35(int depth)
{
	int sum = depth;
	return sum;
}

NOIPA int ct_36(int depth)
{
	int sum = depth;
	return sum;
}

NOIPA int ct_37(int depth)
{
	int sum = depth;
	return sum;
}

NOIPA int ct_38(int depth)
{
	int sum = depth;
	return sum;
}

NOIPA int ct_39(int depth)
{
	int sum = depth;
	return sum;
}

NOIPA int ct_40(int depth)
{
	int sum = depth;
	return sum;
}

NOIPA int ct_41(int depth)
{
	int sum = depth;
	return sum;
}

NOIPA int ct_42(int depth)
{
	int sum = depth;
	return sum;
}

NOIPA int ct_43(int depth)
{
	int sum = depth;
	return sum;
}

NOIPA int ct_44(int depth)
{
	int sum = depth;
	return sum;
}

NOIPA int ct_45(int depth)
{
	int sum = depth;
	return sum;
}

NOIPA int ct_46(int depth)
{
	int sum = depth;
	return sum;
}

NOIPA int ct_47(int depth)
{
	int sum = depth;
	return sum;
}

NOIPA int ct_48(int depth)
{
	int sum = depth;
	return sum;
}

NOIPA int ct_49(int depth)
{
	int sum = depth;
	return sum;
}
