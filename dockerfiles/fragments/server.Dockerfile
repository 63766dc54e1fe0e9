EXPOSE ${ports}
CMD ${argv}
