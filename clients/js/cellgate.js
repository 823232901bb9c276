export const version = '0';
